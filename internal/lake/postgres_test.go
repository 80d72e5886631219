package lake_test

import (
	"context"
	"errors"
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
	if s := withPassword.String(); strings.Contains(s, "s3cret") || !strings.Contains(s, "host 127.0.0.1:1") {
		t.Errorf("String() = %q: want the host and no password", s)
	}
}

// TestPostgresCatalogUnreachable: a catalog URI nobody listens on fails
// Open with an error that says so and names the catalog's host, database
// and user, never its URI or password, whichever form carries the
// password; the error does not unwrap to the driver's (which Temporal
// would record in the run's history too).
func TestPostgresCatalogUnreachable(t *testing.T) {
	for _, c := range []struct{ uri, want string }{
		{"postgres://retrain:s3cret@127.0.0.1:1/cat?connect_timeout=2", "unreachable"},
		{"postgresql://retrain:s3cret@127.0.0.1:1/cat?connect_timeout=2", "unreachable"},
		{"postgres://retrain@127.0.0.1:1/cat?password=s3cret&connect_timeout=2", "unreachable"},
		{"postgres://retrain@127.0.0.1:1/cat?connect_timeout=2&PASSWORD=s3cret", "unreachable"},
		{"postgres://retrain:s3cret@127.0.0.1:1/cat?sslmode=disable&sslpassword=s3cret&connect_timeout=2", "unreachable"},
		{"host=127.0.0.1 port=1 dbname=cat user=retrain password=s3cret connect_timeout=2", "unreachable"},
		{"host=127.0.0.1 port=1 dbname=cat user=retrain password='s3cret' connect_timeout=2", "unreachable"},
		// Passwords pgx cannot read: said so, without quoting the URI.
		{"postgres://retrain:s3/cret@127.0.0.1:1/cat", "cannot be parsed"},
		{"postgres://retrain:s3cret@127.0.0.1:1/cat?connect_timeout=x&password=s3cret", "cannot be parsed"},
		{"postgres://retrain:s3%zzcret@127.0.0.1:1/cat", "cannot be parsed"},
	} {
		_, err := lake.Open(context.Background(), lake.Config{URI: c.uri, Warehouse: "file://" + t.TempDir()}, nil)
		if err == nil {
			t.Fatalf("%s: opened", c.uri)
		}
		msg := err.Error()
		t.Logf("error: %s", msg)
		if !strings.Contains(msg, c.want) || !strings.Contains(msg, "PostgreSQL catalog") || strings.Contains(msg, "s3cret") || strings.Contains(msg, "cret") || strings.Contains(msg, "s3") || strings.Contains(msg, "zz") {
			t.Errorf("%s: error %q: want it to say %q, name the catalog, and hide the password", c.uri, msg, c.want)
		}
		if c.want == "unreachable" && (!strings.Contains(msg, "host 127.0.0.1:1") || !strings.Contains(msg, "database cat") || !strings.Contains(msg, "user retrain")) {
			t.Errorf("%s: error %q: want the host, database and user", c.uri, msg)
		}
		if strings.Contains(msg, c.uri) || strings.Contains(msg, "postgres://") && c.want == "unreachable" {
			t.Errorf("%s: error %q quotes the URI", c.uri, msg)
		}
		var ce *lake.CatalogError
		if !errors.As(err, &ce) || errors.Unwrap(err) != nil {
			t.Errorf("%s: error %T unwraps to %v: want a *lake.CatalogError with no chain", c.uri, err, errors.Unwrap(err))
		}
	}
}
