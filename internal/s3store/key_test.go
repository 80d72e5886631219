package s3store

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateKey(t *testing.T) {
	tests := []struct {
		key string
		ok  bool
	}{
		{"a", true},
		{"a/b/c.parquet", true},
		{"models/fraud/versions/v1/model.json", true},
		{"with space/and-dash_under.score", true},
		{"unicode/é/日本", true},
		{"..a/b..", true}, // dots inside a segment are just characters
		{".hidden", true},
		{"", false},
		{"/abs", false},
		{"a/", false},
		{"a//b", false},
		{"..", false},
		{"../escape", false},
		{"a/../../escape", false},
		{"a/..", false},
		{".", false},
		{"a/./b", false},
		{"tab\there", false},
		{"new\nline", false},
		{"nul\x00", false},
		{"del\x7f", false},
		{"c1\u0085", false},
		{`back\slash`, false},
		{"bad\xffutf8", false},
		{strings.Repeat("k", maxKeyLen), true},
		{strings.Repeat("k", maxKeyLen+1), false},
	}
	for _, tt := range tests {
		err := ValidateKey(tt.key)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateKey(%q) = %v, want ok=%t", tt.key, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ValidateKey(%q) = %v, does not wrap ErrInvalidKey", tt.key, err)
		}
	}
}

func TestValidatePrefix(t *testing.T) {
	tests := []struct {
		prefix string
		ok     bool
	}{
		{"", true},
		{"a", true},
		{"a/", true},
		{"a/b/", true},
		{"/", false},
		{"a//", false},
		{"../", false},
		{"a/../", false},
		{"/a/", false},
	}
	for _, tt := range tests {
		if err := ValidatePrefix(tt.prefix); (err == nil) != tt.ok {
			t.Errorf("ValidatePrefix(%q) = %v, want ok=%t", tt.prefix, err, tt.ok)
		}
	}
}

func TestInvalidKeyErrorEscapesControlCharacters(t *testing.T) {
	err := ValidateKey("a\nINFO forged log line")
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error contains a raw newline: %q", err)
	}
}

func TestParseURI(t *testing.T) {
	tests := []struct {
		in      string
		want    URI
		wantErr bool
	}{
		{in: "s3://bucket", want: URI{Bucket: "bucket"}},
		{in: "s3://bucket/", want: URI{Bucket: "bucket"}},
		{in: "s3://bucket/prefix", want: URI{Bucket: "bucket", Key: "prefix"}},
		{in: "s3://bucket/prefix/", want: URI{Bucket: "bucket", Key: "prefix/"}},
		{in: "s3://my.bucket-1/a/b/c.json", want: URI{Bucket: "my.bucket-1", Key: "a/b/c.json"}},
		{in: "bucket/prefix", wantErr: true},
		{in: "s3:/bucket", wantErr: true},
		{in: "https://bucket/x", wantErr: true},
		{in: "s3://", wantErr: true},
		{in: "s3://ab", wantErr: true},
		{in: "s3://" + strings.Repeat("b", 64), wantErr: true},
		{in: "s3://Bucket", wantErr: true},
		{in: "s3://bucket_x", wantErr: true},
		{in: "s3://-bucket", wantErr: true},
		{in: "s3://bucket-", wantErr: true},
		{in: "s3://bu..cket", wantErr: true},
		{in: "s3://bucket//x", wantErr: true},
		{in: "s3://bucket/../x", wantErr: true},
		{in: "s3://bucket/a/../../x", wantErr: true},
		{in: "s3://bucket/a\x00", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseURI(tt.in)
		if tt.wantErr {
			if err == nil {
				t.Errorf("ParseURI(%q) = %+v, want error", tt.in, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseURI(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

func TestURIString(t *testing.T) {
	tests := []struct {
		u    URI
		want string
	}{
		{URI{Bucket: "bkt"}, "s3://bkt"},
		{URI{Bucket: "bkt", Key: "p"}, "s3://bkt/p"},
		{URI{Bucket: "bkt", Key: "p/"}, "s3://bkt/p/"},
		{URI{Bucket: "bkt", Key: "p/k.json"}, "s3://bkt/p/k.json"},
	}
	for _, tt := range tests {
		if got := tt.u.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.u, got, tt.want)
		}
		back, err := ParseURI(tt.want)
		if err != nil || back != tt.u {
			t.Errorf("ParseURI(%q) = %+v, %v; want round trip to %+v", tt.want, back, err, tt.u)
		}
	}
}

func TestURIJoin(t *testing.T) {
	tests := []struct {
		u    URI
		elem []string
		want string
	}{
		{URI{Bucket: "b"}, []string{"a", "b.json"}, "s3://b/a/b.json"},
		{URI{Bucket: "b", Key: "p/"}, []string{"a"}, "s3://b/p/a"},
		{URI{Bucket: "b", Key: "p"}, []string{"a/", "c/"}, "s3://b/p/a/c/"},
		{URI{Bucket: "b", Key: "p"}, []string{"", "x"}, "s3://b/p/x"},
		{URI{Bucket: "b", Key: "p"}, nil, "s3://b/p"},
	}
	for _, tt := range tests {
		if got := tt.u.Join(tt.elem...).String(); got != tt.want {
			t.Errorf("%+v.Join(%q) = %q, want %q", tt.u, tt.elem, got, tt.want)
		}
	}
}

func TestJoin(t *testing.T) {
	for _, tt := range []struct{ prefix, key, want string }{
		{"", "a/b", "a/b"},
		{"p", "a/b", "p/a/b"},
		{"p/q", "", "p/q/"},
		{"", "", ""},
	} {
		if got := join(tt.prefix, tt.key); got != tt.want {
			t.Errorf("join(%q, %q) = %q, want %q", tt.prefix, tt.key, got, tt.want)
		}
	}
}
