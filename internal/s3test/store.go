package s3test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/retrain-ml/retrain/s3store"
)

// Config returns an s3store.Config for s3://<Bucket>/<prefix> on the server.
func (s *Server) Config(prefix string) s3store.Config {
	return s3store.Config{
		URI:             s.URI(prefix),
		Endpoint:        s.Endpoint,
		Region:          s.Region,
		UsePathStyle:    true,
		AccessKeyID:     s.AccessKey,
		SecretAccessKey: s.SecretKey,
	}
}

// Open opens an s3store.Store on s3://<Bucket>/<prefix> that logs to the
// test's output, failing the test if it cannot.
func (s *Server) Open(t testing.TB, prefix string) *s3store.Store {
	t.Helper()
	cfg := s.Config(prefix)
	// Logs go with the test's output, shown when it fails or with -v.
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	st, err := s3store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("s3test: open store: %v", err)
	}
	return st
}
