package s3test_test

import (
	"bytes"
	"errors"
	"net/http"
	"testing"

	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/s3store"
)

func TestStart(t *testing.T) {
	for _, mode := range []string{"xattr", "sidecar"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "sidecar" {
				t.Setenv("S3TEST_METADATA", "sidecar")
			}
			srv := s3test.Start(t)
			resp, err := http.Get(srv.Endpoint + "/health")
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("health: %v %v", resp, err)
			}
			resp.Body.Close()
			if keys := srv.Keys(t); len(keys) != 0 {
				t.Fatalf("new bucket holds %q", keys)
			}
			// What the rest of the repository relies on works in both
			// metadata modes: checksums, ETags, conditional writes.
			st := srv.Open(t, "p")
			info, err := st.PutIfAbsent(t.Context(), "k", bytes.NewReader([]byte("v1")))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.PutIfAbsent(t.Context(), "k", bytes.NewReader([]byte("v2"))); !errors.Is(err, s3store.ErrExists) {
				t.Fatalf("second PutIfAbsent = %v", err)
			}
			if _, err := st.PutIfMatch(t.Context(), "k", info.ETag, bytes.NewReader([]byte("v3"))); err != nil {
				t.Fatal(err)
			}
			b, got, err := st.GetBytes(t.Context(), "k")
			if err != nil || string(b) != "v3" || got.CRC32C != s3store.CRC32C([]byte("v3")) {
				t.Fatalf("GetBytes = %q %+v %v", b, got, err)
			}
		})
	}
}

func TestServersAreIndependent(t *testing.T) {
	a, b := s3test.Start(t), s3test.Start(t)
	if a.Endpoint == b.Endpoint || a.SecretKey == b.SecretKey {
		t.Fatal("two servers share an endpoint or credentials")
	}
	if _, err := a.Open(t, "").PutBytes(t.Context(), "only-in-a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if keys := b.Keys(t); len(keys) != 0 {
		t.Errorf("server b sees %q", keys)
	}
}
