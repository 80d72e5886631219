package s3test

import (
	"context"
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

// Open opens an s3store.Store on s3://<Bucket>/<prefix>, failing the test if
// it cannot.
func (s *Server) Open(t testing.TB, prefix string) *s3store.Store {
	t.Helper()
	st, err := s3store.Open(context.Background(), s.Config(prefix))
	if err != nil {
		t.Fatalf("s3test: open store: %v", err)
	}
	return st
}
