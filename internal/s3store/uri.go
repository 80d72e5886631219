package s3store

import (
	"fmt"
	"strings"
)

// URI is an s3://bucket/key location. Key may be empty (the whole bucket), an
// object key, or a prefix; it never starts with "/".
type URI struct {
	Bucket string
	Key    string
}

// ParseURI parses s3://bucket, s3://bucket/prefix/ or s3://bucket/key. The
// bucket name must follow S3's naming rules and the key the rules of
// [ValidatePrefix].
func ParseURI(s string) (URI, error) {
	rest, ok := strings.CutPrefix(s, "s3://")
	if !ok {
		return URI{}, fmt.Errorf("s3store: parse %q: not an s3:// URI", s)
	}
	bucket, key, _ := strings.Cut(rest, "/")
	if err := validateBucket(bucket); err != nil {
		return URI{}, fmt.Errorf("s3store: parse %q: %w", s, err)
	}
	if err := ValidatePrefix(key); err != nil {
		return URI{}, fmt.Errorf("%w (in %q)", err, s)
	}
	return URI{Bucket: bucket, Key: key}, nil
}

// String returns the URI as s3://bucket/key, or s3://bucket when Key is empty.
func (u URI) String() string {
	if u.Key == "" {
		return "s3://" + u.Bucket
	}
	return "s3://" + u.Bucket + "/" + u.Key
}

// Join returns u with elem appended to its key, separated by "/". Empty
// elements are skipped and a trailing "/" on the last element is kept, so
// Join can build both object keys and prefixes.
func (u URI) Join(elem ...string) URI {
	parts := make([]string, 0, len(elem)+1)
	if k := strings.TrimSuffix(u.Key, "/"); k != "" {
		parts = append(parts, k)
	}
	for _, e := range elem {
		if e = strings.Trim(e, "/"); e != "" {
			parts = append(parts, e)
		}
	}
	key := strings.Join(parts, "/")
	if len(elem) > 0 && strings.HasSuffix(elem[len(elem)-1], "/") && key != "" {
		key += "/"
	}
	return URI{Bucket: u.Bucket, Key: key}
}

// validateBucket applies S3's bucket naming rules: 3 to 63 characters of
// lower-case letters, digits, '.' and '-', starting and ending with a letter
// or digit, with no "..".
func validateBucket(b string) error {
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("bucket name %q must be 3 to 63 characters", b)
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && c != '.' && c != '-' {
			return fmt.Errorf("bucket name %q: invalid character %q", b, c)
		}
		if (i == 0 || i == len(b)-1) && !alnum {
			return fmt.Errorf("bucket name %q must start and end with a letter or digit", b)
		}
	}
	if strings.Contains(b, "..") {
		return fmt.Errorf("bucket name %q contains \"..\"", b)
	}
	return nil
}
