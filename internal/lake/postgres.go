package lake

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for a PostgreSQL catalog
)

// IsPostgresURI reports whether a sql catalog URI names a PostgreSQL
// database: a postgres:// or postgresql:// URL, or a libpq key=value
// string (host=db dbname=lake user=retrain ...). Such a catalog is what
// workers on several hosts share: its compare-and-swap on
// metadata_location is a row update the server serializes, where SQLite's
// file locks hold only within one host.
func IsPostgresURI(uri string) bool {
	u := strings.ToLower(uri)
	return strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://") || isPostgresDSN(uri)
}

// isPostgresDSN reports whether uri is a libpq key=value string: its
// first word is one of libpq's connection keys followed by "=".
func isPostgresDSN(uri string) bool {
	key, _, ok := strings.Cut(strings.TrimSpace(uri), "=")
	if !ok {
		return false
	}
	switch strings.TrimSpace(key) {
	case "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "service", "sslmode", "connect_timeout", "application_name":
		return true
	}
	return false
}

// sqlDriver is the database/sql driver and the iceberg-go dialect of a sql
// catalog URI. iceberg-go's sql catalog builds its queries with bun, whose
// pgdialect speaks to any database/sql PostgreSQL driver; pgx's stdlib
// driver ("pgx") takes the postgres:// URI as it is.
func sqlDriver(uri string) (driver, dialect string) {
	if IsPostgresURI(uri) {
		return "pgx", "postgres"
	}
	return "sqlite", "sqlite"
}

// pingPostgres checks that a PostgreSQL catalog's database answers before
// iceberg-go's catalog opens it, so that an unreachable server or a wrong
// password reads as such (naming the catalog's host, database and user,
// never its URI) rather than as a failure to create the catalog's tables.
func pingPostgres(ctx context.Context, c Config) error {
	// pgx parses the URI only when it connects, and then quotes it in
	// its error: parse it first.
	if _, err := pgconn.ParseConfig(c.URI); err != nil {
		return catalogError(c, "cannot be used", err)
	}
	db, err := sql.Open("pgx", c.URI)
	if err != nil {
		return catalogError(c, "cannot be used", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		return catalogError(c, "is unreachable (is PostgreSQL running there, and do the user, password and database exist?)", err)
	}
	return nil
}

// Retries of a catalog statement PostgreSQL aborted to keep transactions
// serializable (iceberg-go's sql catalog runs each operation in one).
const (
	maxSerializationAttempts = 6
	serializationBackoff     = 20 * time.Millisecond
)

// isSerializationFailure reports whether PostgreSQL rolled a transaction
// back because concurrent ones conflicted (SQLSTATE 40001, or 40P01, a
// deadlock): it changed nothing and may be run again. Several workers
// creating tables in one namespace at once hit it.
func isSerializationFailure(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "40001" || pgErr.Code == "40P01"
	}
	// iceberg-go may flatten the driver's error into text.
	return err != nil && (strings.Contains(err.Error(), "SQLSTATE 40001") || strings.Contains(err.Error(), "SQLSTATE 40P01"))
}

// retrySerialization runs op until it succeeds, fails otherwise than by a
// serialization failure, or has failed maxSerializationAttempts times.
func retrySerialization(ctx context.Context, op func() error) error {
	var err error
	for attempt := range maxSerializationAttempts {
		if err = op(); !isSerializationFailure(err) {
			return err
		}
		t := time.NewTimer(serializationBackoff << attempt)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
	return err
}
