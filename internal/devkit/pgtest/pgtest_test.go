package pgtest_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/retrain-ml/retrain/internal/devkit/pgtest"
)

// TestStart starts a cluster and uses two fresh databases of it.
func TestStart(t *testing.T) {
	s := pgtest.Start(t)
	for range 2 {
		db, err := sql.Open("pgx", s.NewDatabase(t))
		if err != nil {
			t.Fatal(err)
		}
		var v string
		if err := db.QueryRowContext(context.Background(), "SHOW server_version").Scan(&v); err != nil {
			t.Fatal(err)
		}
		db.Close()
		t.Logf("PostgreSQL %s on port %d", v, s.Port)
	}
}
