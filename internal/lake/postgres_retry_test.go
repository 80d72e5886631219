package lake

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestSerializationFailuresRetried: a transaction PostgreSQL aborted to
// keep transactions serializable changed nothing, so the catalog runs it
// again (CreateTable) or redoes the commit (IsConflict); other errors are
// not retried.
func TestSerializationFailuresRetried(t *testing.T) {
	serial := fmt.Errorf("create table: %w", &pgconn.PgError{Code: "40001", Message: "could not serialize access"})
	flattened := errors.New("ERROR: could not serialize access due to read/write dependencies among transactions (SQLSTATE 40001)")
	for _, err := range []error{serial, flattened, &pgconn.PgError{Code: "40P01"}} {
		if !isSerializationFailure(err) || !IsConflict(err) {
			t.Errorf("%v: not taken for a serialization failure", err)
		}
	}
	for _, err := range []error{nil, errors.New("disk full"), &pgconn.PgError{Code: "23505"}} {
		if isSerializationFailure(err) {
			t.Errorf("%v: taken for a serialization failure", err)
		}
	}
	calls := 0
	err := retrySerialization(context.Background(), func() error {
		if calls++; calls < 3 {
			return serial
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("retried %d times, %v: want success on the third", calls, err)
	}
	calls = 0
	if err := retrySerialization(context.Background(), func() error { calls++; return serial }); !isSerializationFailure(err) || calls != maxSerializationAttempts {
		t.Errorf("always failing: %d calls, %v", calls, err)
	}
	calls = 0
	if err := retrySerialization(context.Background(), func() error { calls++; return errors.New("disk full") }); err == nil || calls != 1 {
		t.Errorf("other error: %d calls, %v", calls, err)
	}
}
