package lake_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/devkit/pgtest"
	"github.com/retrain-ml/retrain/internal/lake"
)

// TestPostgresCatalog runs the catalog traffic of several workers against
// a real PostgreSQL catalog: eight handles (eight worker processes' pools)
// create tables in one namespace and commit to them at once; a commit that
// loses a race with another handle is redone (Update) and both land; and
// the password in a URI is not printed.
func TestPostgresCatalog(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	cfg := lake.Config{URI: srv.NewDatabase(t), Warehouse: "file://" + t.TempDir()}
	if r, err := cfg.Resolved(); err != nil || r.Properties()["sql.driver"] != "pgx" || r.Properties()["sql.dialect"] != "postgres" || r.URI != cfg.URI {
		t.Fatalf("postgres config resolved to %+v (%v)", r.Properties(), err)
	}
	cats := openHandles(t, cfg, 8)
	for i, err := range createParallel(ctx, t, cats, "pg") {
		if err != nil {
			t.Errorf("job %d: %v", i, err)
		}
	}
	for i := range cats {
		if sum := checksum(t, cats[i], fmt.Sprintf("pg.t%d", i)); sum.Rows != 50 {
			t.Errorf("table pg.t%d holds %d rows, want 50", i, sum.Rows)
		}
	}

	// Two handles, one table: the second's commit loses the
	// compare-and-swap, is redone on the fresh table, and both land.
	us, them := cats[0], cats[1]
	calls := 0
	_, err := us.Update(ctx, "pg.t0", func(ctx context.Context, tbl *table.Table, tx *table.Transaction) error {
		calls++
		if calls == 1 {
			write(t, them, "pg.t0", rows(5, 5000))
		}
		schema, rec := record(t, tbl, rows(7, 6000))
		defer rec.Release()
		files, err := lake.WriteFiles(ctx, tbl, schema, func(yield func(arrow.RecordBatch, error) bool) { yield(rec, nil) })
		if err != nil {
			return err
		}
		return tx.AddDataFiles(ctx, files, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Errorf("build ran %d times, want 2 (once more after losing the race)", calls)
	}
	if sum := checksum(t, them, "pg.t0"); sum.Rows != 62 {
		t.Errorf("%d rows, want 50+5+7", sum.Rows)
	}
	withPassword := lake.Config{URI: "postgres://retrain:s3cret@127.0.0.1:1/x", Warehouse: "file:///w"}
	if s := withPassword.String(); strings.Contains(s, "s3cret") || !strings.Contains(s, "127.0.0.1:1") {
		t.Errorf("String() = %q: want the host and no password", s)
	}
}

// TestPostgresCatalogUnreachable: a catalog URI nobody listens on fails
// Open with an error that says so and names the database, not its
// password.
func TestPostgresCatalogUnreachable(t *testing.T) {
	for _, uri := range []string{"postgres://retrain:s3cret@127.0.0.1:1/cat?connect_timeout=2", "postgresql://retrain:s3cret@127.0.0.1:1/cat?connect_timeout=2"} {
		_, err := lake.Open(context.Background(), lake.Config{URI: uri, Warehouse: "file://" + t.TempDir()}, nil)
		if err == nil {
			t.Fatalf("%s: opened", uri)
		}
		if msg := err.Error(); !strings.Contains(msg, "unreachable") || !strings.Contains(msg, "127.0.0.1:1/cat") || strings.Contains(msg, "s3cret") {
			t.Errorf("%s: error %q: want it to say the database is unreachable, name it, and hide the password", uri, msg)
		}
	}
}
