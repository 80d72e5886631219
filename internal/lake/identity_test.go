package lake_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/internal/lake"
)

// TestIdentity: a catalog's identity names its engine, host, database
// and user (or file, or server) and holds no password, in whatever form
// the URI carries one; two URIs that differ only in the password have the
// same identity.
func TestIdentity(t *testing.T) {
	for _, c := range []struct {
		cfg  lake.Config
		want string
	}{
		{lake.Config{URI: "postgres://retrain:s3cret@db.internal:5432/lake", Warehouse: "s3://b/w"},
			"PostgreSQL catalog (host db.internal:5432, database lake, user retrain)"},
		{lake.Config{URI: "postgresql://db.internal/lake?user=retrain&password=s3cret&sslpassword=s3cret", Warehouse: "s3://b/w"},
			"PostgreSQL catalog (host db.internal, database lake, user retrain)"},
		{lake.Config{URI: "host=db.internal port=5433 dbname=lake user=retrain password='s3cret'", Warehouse: "s3://b/w"},
			"PostgreSQL catalog (host db.internal:5433, database lake, user retrain)"},
		{lake.Config{URI: "postgres://retrain:s3/cret@db.internal/lake", Warehouse: "s3://b/w"},
			"PostgreSQL catalog (postgres://retrain:xxxxx@db.internal/lake)"},
		{lake.Config{URI: "postgres://retrain:12/s3cret@db.internal/lake", Warehouse: "s3://b/w"},
			"PostgreSQL catalog (postgres://retrain:xxxxx@db.internal/lake)"},
		{lake.Config{URI: "file:/data/catalog.db?_pragma=journal_mode(WAL)", Warehouse: "file:///data/w"},
			"SQLite catalog (file /data/catalog.db)"},
		{lake.Config{Type: "rest", URI: "https://cat.example/api?token=s3cret", Warehouse: "s3://b/w"},
			"rest catalog (https://cat.example/api)"},
		{lake.Config{Type: "glue", Warehouse: "s3://b/w"}, "glue catalog"},
	} {
		id := c.cfg.Identity()
		if got := id.String(); got != c.want {
			t.Errorf("%q: identity %q, want %q", c.cfg.URI, got, c.want)
		}
		for _, s := range []string{id.Key(), c.cfg.String()} {
			if strings.Contains(s, "s3cret") || strings.Contains(s, "cret") {
				t.Errorf("%q: %q holds the password", c.cfg.URI, s)
			}
		}
	}
	for _, pair := range [][2]string{
		{"postgres://retrain:one@db/lake", "postgres://retrain:two@db/lake"},
		{"postgres://retrain@db/lake?password=one", "postgres://retrain@db/lake?password=two"},
		{"postgres://retrain@db/lake?sslpassword=one&sslmode=require", "postgres://retrain@db/lake?sslpassword=two&sslmode=require"},
		{"host=db dbname=lake user=retrain password=one", "host=db dbname=lake user=retrain password=two"},
		{"postgres://retrain:o/ne@db/lake", "postgres://retrain:t/wo@db/lake"},
	} {
		a, b := lake.Config{URI: pair[0], Warehouse: "s3://b/w"}, lake.Config{URI: pair[1], Warehouse: "s3://b/w"}
		if a.Identity().Key() != b.Identity().Key() {
			t.Errorf("identities of %q and %q differ: %q vs %q", pair[0], pair[1], a.Identity().Key(), b.Identity().Key())
		}
	}
	for _, pair := range [][2]string{
		{"postgres://retrain@db1/lake", "postgres://retrain@db2/lake"},
		{"postgres://retrain@db/lake1", "postgres://retrain@db/lake2"},
		{"postgres://alice@db/lake", "postgres://bob@db/lake"},
		{"postgres://retrain@db:5432/lake", "postgres://retrain@db:5433/lake"},
	} {
		a, b := lake.Config{URI: pair[0], Warehouse: "s3://b/w"}, lake.Config{URI: pair[1], Warehouse: "s3://b/w"}
		if a.Identity().Key() == b.Identity().Key() {
			t.Errorf("%q and %q have one identity", pair[0], pair[1])
		}
	}
}

// TestSQLiteCatalogUnusable: a SQLite catalog that cannot be set up fails
// Open with an error naming its file, not its URI's parameters.
func TestSQLiteCatalogUnusable(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "file")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	uri := "file:" + blocker + "/sub/catalog.db?password=s3cret"
	_, err := lake.Open(context.Background(), lake.Config{URI: uri, Warehouse: "file://" + dir + "/w"}, nil)
	var ce *lake.CatalogError
	if err == nil || !errors.As(err, &ce) {
		t.Fatalf("opened, or error %v is no CatalogError", err)
	}
	if msg := err.Error(); strings.Contains(msg, "s3cret") || !strings.Contains(msg, "SQLite catalog (file "+blocker+"/sub/catalog.db)") {
		t.Errorf("error %q: want the catalog's file and no password", msg)
	}
}

// TestIsPostgresURI: URLs and libpq key=value strings name PostgreSQL;
// SQLite files do not.
func TestIsPostgresURI(t *testing.T) {
	for uri, want := range map[string]bool{
		"postgres://db/lake":               true,
		"POSTGRESQL://db/lake":             true,
		"host=db dbname=lake":              true,
		" dbname=lake user=u":              true,
		"file:/data/catalog.db":            false,
		"/data/catalog.db":                 false,
		"file:/data/x.db?_pragma=a&host=b": false,
		"s3://bucket/prefix":               false,
		"mode=ro":                          false,
	} {
		if got := lake.IsPostgresURI(uri); got != want {
			t.Errorf("IsPostgresURI(%q) = %v, want %v", uri, got, want)
		}
	}
}
