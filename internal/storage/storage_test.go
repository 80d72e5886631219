package storage_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/internal/storage"
)

func TestFlags(t *testing.T) {
	for _, k := range []string{"RETRAIN_S3_URI", "RETRAIN_S3_ENDPOINT", "RETRAIN_S3_REGION", "RETRAIN_S3_PATH_STYLE", "RETRAIN_DATA_DIR"} {
		t.Setenv(k, "")
	}
	cases := []struct {
		name      string
		args      []string
		withLake  bool
		uri       string
		endpoint  string
		pathStyle bool
		dataDir   string
	}{
		{"defaults", nil, false, "", "", false, ".retrain"},
		{"S3-compatible server", []string{"--s3-uri", "s3://b/p", "--s3-endpoint", "http://h:1"}, false, "s3://b/p", "http://h:1", true, ".retrain"},
		{"AWS", []string{"--s3-uri", "s3://b/p"}, false, "s3://b/p", "", false, ".retrain"},
		{"explicit virtual hosts", []string{"--s3-uri", "s3://b", "--s3-endpoint", "http://h:1", "--s3-path-style=false"}, false, "s3://b", "http://h:1", false, ".retrain"},
		{"path style without endpoint", []string{"--s3-uri", "s3://b", "--s3-path-style"}, false, "s3://b", "", true, ".retrain"},
		{"shared with the lake's flags", []string{"--s3-uri", "s3://b", "--s3-endpoint", "http://h:2", "--data-dir", "/d"}, true, "s3://b", "http://h:2", true, "/d"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
			var lk lake.Config
			if c.withLake {
				lk.AddFlags(fs)
				lk.AddDataDirFlag(fs)
			}
			var cfg storage.Config
			cfg.AddFlags(fs)
			cfg.AddDataDirFlag(fs)
			if err := fs.Parse(c.args); err != nil {
				t.Fatal(err)
			}
			if cfg.DataDir != c.dataDir {
				t.Errorf("data dir %q, want %q", cfg.DataDir, c.dataDir)
			}
			if c.withLake && (lk.S3.Endpoint != c.endpoint || lk.DataDir != cfg.DataDir) {
				t.Errorf("lake config %+v does not share the flags", lk)
			}
			got, ok, err := cfg.Resolve()
			if err != nil {
				t.Fatal(err)
			}
			if c.uri == "" {
				if ok {
					t.Fatalf("configured without a URI or dev stack: %+v", got)
				}
				return
			}
			if !ok || got.URI != c.uri || got.Endpoint != c.endpoint || got.UsePathStyle != c.pathStyle {
				t.Fatalf("Resolve = %+v, %t", got, ok)
			}
		})
	}
}

// TestOpenFailsBeforeAnyWrite: a wrong endpoint, bad credentials, a missing
// bucket and a URI that escapes its bucket are reported by Open, with a
// message that says what is wrong and holds no secret.
func TestOpenFailsBeforeAnyWrite(t *testing.T) {
	srv := s3test.Start(t)
	good := srv.Config("p")
	good.OpenTimeout = 5 * time.Second
	cases := []struct {
		name string
		edit func(*s3store.Config)
		want error
		msg  string
	}{
		{"unreachable endpoint", func(c *s3store.Config) { c.Endpoint = "http://127.0.0.1:1" }, s3store.ErrUnreachable, "127.0.0.1:1"},
		{"wrong secret", func(c *s3store.Config) { c.SecretAccessKey = "not-the-secret-at-all" }, s3store.ErrAccessDenied, "access denied"},
		{"unknown access key", func(c *s3store.Config) { c.AccessKeyID = "nobody-at-all" }, s3store.ErrAccessDenied, "access denied"},
		{"no such bucket", func(c *s3store.Config) { c.URI = "s3://no-such-bucket/p" }, s3store.ErrNoSuchBucket, "no-such-bucket"},
		{"traversal in the URI", func(c *s3store.Config) { c.URI = "s3://" + srv.Bucket + "/p/../../etc" }, nil, `".." path segment`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := good
			c.edit(&cfg)
			_, err := storage.Open(t.Context(), storage.Config{S3: cfg}, nil)
			if err == nil {
				t.Fatal("Open succeeded")
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("error %v, want %v", err, c.want)
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Errorf("error %q does not say %q", err, c.msg)
			}
			if strings.Contains(err.Error(), srv.SecretKey) || strings.Contains(err.Error(), cfg.SecretAccessKey) {
				t.Errorf("error holds a secret: %v", err)
			}
		})
	}
	if keys := srv.Keys(t); len(keys) != 0 {
		t.Fatalf("failed opens wrote %v", keys)
	}
}

// TestDevConnection: a data dir without a running dev stack is no store;
// one whose stack recorded its server opens it.
func TestDevConnection(t *testing.T) {
	dir := t.TempDir()
	if _, err := storage.Open(t.Context(), storage.Config{DataDir: dir}, nil); !errors.Is(err, storage.ErrNotConfigured) {
		t.Fatalf("empty data dir: %v", err)
	}
	srv := s3test.Start(t)
	if err := storage.WriteDevConnection(dir, srv.Config("")); err != nil {
		t.Fatal(err)
	}
	st, err := storage.Open(t.Context(), storage.Config{DataDir: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.URI().Bucket != srv.Bucket {
		t.Fatalf("opened %s", st.URI())
	}
	// A stack that is gone is named in the error.
	stale := srv.Config("")
	stale.Endpoint = "http://127.0.0.1:1"
	if err := storage.WriteDevConnection(dir, stale); err != nil {
		t.Fatal(err)
	}
	_, err = storage.Open(t.Context(), storage.Config{DataDir: dir}, nil)
	if err == nil || !strings.Contains(err.Error(), "retrain dev") || !strings.Contains(err.Error(), storage.DevConnectionPath(dir)) {
		t.Fatalf("stale dev connection: %v", err)
	}
}
