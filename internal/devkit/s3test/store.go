package s3test

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/retrain-ml/retrain/internal/s3store"
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

// Winner checks the outcomes of writers racing for one key with
// conditional writes: exactly one error is nil, and every other one is
// lost (by errors.Is). It returns the winner's index, failing t otherwise.
func Winner(t testing.TB, errs []error, lost error) int {
	t.Helper()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("writers %d and %d both won", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, lost):
			t.Errorf("writer %d: %v, want %v", i, err, lost)
		}
	}
	if winner < 0 {
		t.Fatal("no writer won")
	}
	return winner
}
