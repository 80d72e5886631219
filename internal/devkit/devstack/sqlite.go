package devstack

import (
	"context"
	dbsql "database/sql"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"

	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/metrics"
	persistencesql "go.temporal.io/server/common/persistence/sql"
	"go.temporal.io/server/common/persistence/sql/sqlplugin"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	"go.temporal.io/server/common/resolver"
	sqliteschema "go.temporal.io/server/schema/sqlite"

	// The "sqlite" database/sql driver; the server's plugin uses the same.
	_ "modernc.org/sqlite"
)

// dbFileName is the SQLite file inside Options.DataDir. SQLite adds
// temporal.db-wal and temporal.db-shm next to it while the file is open.
const dbFileName = "temporal.db"

// sqlitePragmas are applied on every connection the server opens. The
// server's sqlite plugin turns each ConnectAttributes entry that is not a URI
// parameter (mode, cache, ...) into a `_pragma=key=value` DSN parameter, which
// the modernc driver executes right after opening the connection.
//
//   - journal_mode=wal: commits append to the write-ahead log instead of
//     rewriting pages through a rollback journal; readers do not block the
//     writer. Persistent in the file once set.
//   - synchronous=normal: in WAL mode, fsync only at checkpoints, not on every
//     commit. A commit is complete once it is written to the WAL (in the OS
//     page cache), so it survives the process being killed, but the last
//     commits before a power loss or kernel crash may be rolled back. The
//     database itself stays consistent either way. This is the trade-off that
//     makes a dev stack fast; see the package documentation.
//   - busy_timeout: wait instead of failing with SQLITE_BUSY when another
//     connection (e.g. `sqlite3` on the file, or schema setup) holds the lock.
var sqlitePragmas = map[string]string{
	"journal_mode": "wal",
	"synchronous":  "normal",
	"busy_timeout": "10000",
}

// expectedPragmas are the values SQLite reports back for sqlitePragmas
// (synchronous is reported as a number: NORMAL = 1).
var expectedPragmas = []struct{ name, want string }{
	{"journal_mode", "'wal'"},
	{"synchronous", "1"},
}

// sqliteConfig is the data store config for the server. mode=rw, not rwc:
// the file must already exist (ensureSchema creates it), so a data dir that
// disappears under a running stack is an error, not a new empty database.
func sqliteConfig(path string) *config.SQL {
	attrs := map[string]string{"mode": "rw"}
	for k, v := range sqlitePragmas {
		attrs[k] = v
	}
	return &config.SQL{
		PluginName:        sqliteplugin.PluginName,
		DatabaseName:      path,
		ConnectAttributes: attrs,
		// One connection, shared by all services of the process (the plugin
		// pools by DSN). SQLite has a single writer anyway; with 4
		// connections a 1,000-activity fan-out took 2-2.5x longer (busy
		// waits and lock contention), sequential steps were no faster.
		MaxConns:     1,
		MaxIdleConns: 1,
	}
}

// validateDBPath rejects paths the plugin cannot express in its "file:" DSN
// (it does not escape the path).
func validateDBPath(path string) error {
	if strings.ContainsAny(path, "?#%") {
		return fmt.Errorf("path %q contains one of ?, # or %%, which SQLite file URIs cannot hold", path)
	}
	return nil
}

// dsn builds a DSN the same way the server's plugin does, for our own
// short-lived connections.
func dsn(path string, attrs map[string]string) string {
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	q := url.Values{}
	for _, k := range keys {
		switch k {
		case "mode", "cache", "immutable", "vfs":
			q.Set(k, attrs[k])
		default:
			q.Add("_pragma", k+"="+attrs[k])
		}
	}
	q.Set("_time_format", "sqlite")
	return "file:" + path + "?" + q.Encode()
}

// ensureSchema creates the database file with the server's SQLite schema
// (persistence and visibility in one file) if it does not hold it yet.
//
// The schema is applied inside one transaction on our own connection, so a
// crash during the first start leaves either no schema or all of it, never
// the half-built file that would make every later start fail. The server's
// helper (sqliteschema.SetupSchema) runs the statements one by one on the
// plugin's shared connection, which is kept open for the life of the process.
func ensureSchema(ctx context.Context, path string) (created bool, err error) {
	attrs := map[string]string{"mode": "rwc"}
	for k, v := range sqlitePragmas {
		attrs[k] = v
	}
	db, err := dbsql.Open("sqlite", dsn(path, attrs))
	if err != nil {
		return false, fmt.Errorf("open %s: %w", path, err)
	}
	defer func() {
		// Closing the last connection checkpoints the WAL into the file.
		if cerr := db.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close %s: %w", path, cerr)
		}
	}()
	db.SetMaxOpenConns(1)

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		// The DSN's pragmas run here, on the first real connection: this is
		// where a file that is not an SQLite database is noticed.
		return false, fmt.Errorf("open %s: %w", path, err)
	}
	defer func() { _ = tx.Rollback() }()

	var n int
	if err := tx.QueryRowContext(ctx,
		`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('namespaces', 'executions_visibility')`,
	).Scan(&n); err != nil {
		return false, fmt.Errorf("read schema of %s (not an SQLite database?): %w", path, err)
	}
	switch n {
	case 2:
		return false, nil
	case 0:
	default:
		return false, fmt.Errorf("%s holds only part of the Temporal schema; move it away to start fresh", path)
	}

	if err := sqliteschema.SetupSchemaOnDB(txExecer{ctx: ctx, tx: tx}); err != nil {
		return false, fmt.Errorf("create Temporal schema in %s: %w", path, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("commit Temporal schema in %s: %w", path, err)
	}
	return true, nil
}

// txExecer runs the server's schema statements inside our transaction.
// SetupSchemaOnDB only calls Exec; the embedded interface is nil, so any
// other method panics loudly rather than silently running outside the
// transaction should a future server version start calling it.
type txExecer struct {
	sqlplugin.AdminDB
	ctx context.Context
	tx  *dbsql.Tx
}

func (e txExecer) Exec(stmt string, args ...any) error {
	_, err := e.tx.ExecContext(e.ctx, stmt, args...)
	return err
}

// errPragma is returned by checkPragmas when a setting is not in effect.
var errPragma = errors.New("sqlite setting not in effect")

// checkPragmas verifies, on the connection the server itself uses, that the
// pragmas took effect: a wrong DSN would otherwise silently fall back to
// SQLite's defaults (rollback journal, synchronous=FULL) and change both the
// speed and the durability the package documents.
//
// The plugin keeps one shared connection per DSN for the life of the process
// and hands it to anyone asking with the same config, so opening an admin DB
// here gets exactly the server's connection. The admin interface can only
// Exec, so each check is a statement that fails when the value differs:
// abs() of the smallest int64 raises "integer overflow".
func checkPragmas(cfg *config.SQL, want []struct{ name, want string }) error {
	db, err := persistencesql.NewSQLAdminDB(sqlplugin.DbKindUnknown, cfg,
		resolver.NewNoopResolver(), log.NewNoopLogger(), metrics.NoopMetricsHandler)
	if err != nil {
		return fmt.Errorf("open server connection: %w", err)
	}
	defer func() { _ = db.Close() }()
	for _, p := range want {
		stmt := fmt.Sprintf(
			`SELECT CASE WHEN (SELECT %[1]s FROM pragma_%[1]s) = %[2]s THEN 1 ELSE abs(-9223372036854775808) END`,
			p.name, p.want)
		if err := db.Exec(stmt); err != nil {
			return fmt.Errorf("%w: %s is not %s on the server's connection (%v)", errPragma, p.name, p.want, err)
		}
	}
	return nil
}
