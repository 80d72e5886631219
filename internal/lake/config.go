// Package lake opens retrain's Iceberg catalog and holds the table
// operations the feature backfill needs that iceberg-go v0.7.0 does not
// offer directly: dynamic partition overwrite, adding files to bucket
// partitions, moving main to any snapshot, order-independent checksums and
// per-table commits that are redone (never replayed blindly) on conflict.
package lake

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/spf13/pflag"

	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/internal/storage"
)

// Catalog types Open understands.
const (
	TypeSQL  = "sql"
	TypeREST = "rest"
	TypeGlue = "glue"
)

// Config says where the catalog and its warehouse are. The zero value plus
// a DataDir is the dev stack's catalog: SQLite under the data dir and a
// warehouse on local disk. Production sets Type, URI and Warehouse (and S3
// settings, or leaves them to the AWS environment).
type Config struct {
	Type      string // sql (default), rest or glue
	Name      string // catalog name recorded in the catalog; default "retrain"
	URI       string // sql: database URI; rest: server URL; glue: unused
	Warehouse string // file:///path or s3://bucket/prefix
	// DataDir fills URI and Warehouse of a sql catalog that sets neither.
	DataDir string
	S3      S3Config
	// Props are further catalog properties (for example rest credentials
	// or glue settings), passed through as they are.
	Props map[string]string
}

// S3Config reaches the warehouse's S3 store. Empty fields fall back to the
// AWS environment (AWS_REGION, AWS_ACCESS_KEY_ID, ..., AWS_S3_ENDPOINT).
//
// Table IO on an S3 warehouse (sql and glue catalogs) follows the object
// store's retry policy and retry counting (s3store.AWSConfig): the fields
// below are those of s3store.Config, and 0 takes its defaults.
type S3Config struct {
	Endpoint        string
	Region          string
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string

	MaxAttempts           int
	MaxBackoff            time.Duration
	ResponseHeaderTimeout time.Duration
	// OnRetry is told of every warehouse request sent again (after it is
	// logged at Warn to the catalog's logger). It must not block.
	OnRetry func(s3store.RetryEvent) `json:"-"`
	// OnRequest is told of every warehouse request sent (s3store's
	// Config.OnRequest). It must not block.
	OnRequest func(s3store.RequestEvent) `json:"-"`
	// Read tunes how tables are read: few round trips per file, many
	// files in flight, metadata cached (ReadConfig, s3read.go).
	Read ReadConfig
}

// AddFlags registers the catalog flags, defaulting from the environment.
// The data dir flag is separate (AddDataDirFlag) because commands such as
// `retrain dev` already have one of their own.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.Type, "catalog-type", os.Getenv("RETRAIN_CATALOG_TYPE"), "Iceberg catalog: sql, rest or glue (env RETRAIN_CATALOG_TYPE; default sql under the data dir)")
	fs.StringVar(&c.URI, "catalog-uri", os.Getenv("RETRAIN_CATALOG_URI"), "catalog URI: for sql a SQLite file URI (one host) or postgres://user:pass@host/db (several hosts); the server URL for rest (env RETRAIN_CATALOG_URI)")
	fs.StringVar(&c.Warehouse, "warehouse", os.Getenv("RETRAIN_WAREHOUSE"), "warehouse location, file:///path or s3://bucket/prefix (env RETRAIN_WAREHOUSE)")
	fs.StringToStringVar(&c.Props, "catalog-prop", nil, "extra catalog property key=value (repeatable)")
	fs.StringVar(&c.S3.Endpoint, "s3-endpoint", os.Getenv("RETRAIN_S3_ENDPOINT"), "S3 endpoint for the warehouse (env RETRAIN_S3_ENDPOINT; default: AWS)")
	fs.StringVar(&c.S3.Region, "s3-region", os.Getenv("RETRAIN_S3_REGION"), "S3 region (env RETRAIN_S3_REGION; default: the AWS environment)")
}

// AddDataDirFlag registers --data-dir for commands that have none.
func (c *Config) AddDataDirFlag(fs *pflag.FlagSet) {
	// The dev stack's catalog lives in DIR/catalog.db and its warehouse in
	// DIR/warehouse unless configured otherwise.
	fs.StringVar(&c.DataDir, "data-dir", storage.DataDirFromEnv(), "dev stack data dir: its catalog.db and warehouse/ are the lake unless --catalog-uri is set (env RETRAIN_DATA_DIR)")
}

// Configured reports whether the config names a catalog at all.
func (c Config) Configured() bool {
	return c.URI != "" || c.DataDir != "" || (c.Type != "" && c.Type != TypeSQL)
}

// Resolved returns the config with defaults applied: the catalog type, its
// name, and for a sql catalog under a data dir the database and warehouse
// paths (absolute, so a worker and a CLI in different directories agree).
func (c Config) Resolved() (Config, error) {
	if c.Type == "" {
		c.Type = TypeSQL
	}
	c.Type = strings.ToLower(c.Type)
	if c.Name == "" {
		c.Name = "retrain"
	}
	switch c.Type {
	case TypeSQL:
		if c.URI == "" || c.Warehouse == "" {
			if c.DataDir == "" {
				return c, errors.New("lake: no catalog configured: set a data dir, or --catalog-uri and --warehouse")
			}
			dir, err := filepath.Abs(c.DataDir)
			if err != nil {
				return c, fmt.Errorf("lake: data dir: %w", err)
			}
			if c.URI == "" {
				c.URI = sqliteURI(filepath.Join(dir, "catalog.db"))
			}
			if c.Warehouse == "" {
				c.Warehouse = "file://" + filepath.ToSlash(filepath.Join(dir, "warehouse"))
			}
		}
		if d := c.Props["sql.driver"]; (d == "" && !IsPostgresURI(c.URI)) || d == "sqlite" {
			c.URI = sqliteWriters(c.URI)
		}
	case TypeREST:
		if c.URI == "" {
			return c, errors.New("lake: a rest catalog needs --catalog-uri")
		}
	case TypeGlue:
	default:
		return c, fmt.Errorf("lake: unknown catalog type %q (want sql, rest or glue)", c.Type)
	}
	return c, nil
}

// sqliteURI is the modernc.org/sqlite DSN of a catalog database. WAL lets
// readers go on while one connection writes; sqliteWriters adds what lets
// writers share the file.
func sqliteURI(path string) string {
	return "file:" + filepath.ToSlash(path) + "?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)"
}

// sqliteWriters makes every connection to a SQLite catalog wait for the
// write lock instead of failing, unless the URI already says otherwise.
// Several stage nodes create and commit tables at once, from one worker's
// connection pool or from several worker and CLI processes; the catalog's
// writes are short compare-and-swap updates, so waiting is always right.
//
//   - busy_timeout: a statement that finds the file locked retries for up
//     to 30 s instead of failing at once with SQLITE_BUSY.
//   - _txlock=immediate: write transactions start with BEGIN IMMEDIATE.
//     iceberg-go's sql catalog creates a table (and commits a new one) in a
//     transaction that reads first (does the namespace exist, is the name
//     free) and inserts after. Begun DEFERRED, such a transaction holds a
//     read snapshot when it asks for the write lock, and SQLite then fails
//     it with SQLITE_BUSY at once, without consulting busy_timeout (waiting
//     there could deadlock, or its snapshot is already stale:
//     SQLITE_BUSY_SNAPSHOT); iceberg-go retries that 3 times within 30 ms
//     and then gives up ("failed to create table: database is locked").
//     IMMEDIATE takes the write lock at BEGIN, before any read, where the
//     busy timeout applies, so concurrent writers queue. The lock is in the
//     database file, so it orders writers in other processes too, which no
//     lock inside this process could. Read-only transactions (table loads)
//     stay deferred and never wait for a writer.
func sqliteWriters(uri string) string {
	if !strings.HasPrefix(uri, "file:") {
		return uri
	}
	sep := "?"
	if strings.Contains(uri, "?") {
		sep = "&"
	}
	if !strings.Contains(uri, "busy_timeout") && !strings.Contains(uri, "_timeout=") {
		uri += sep + "_pragma=busy_timeout(30000)"
		sep = "&"
	}
	if !strings.Contains(uri, "_txlock=") {
		uri += sep + "_txlock=immediate"
	}
	return uri
}

// Properties are the iceberg-go catalog properties of a resolved config.
// Catalog properties flow on to every table's IO, which is how the S3
// settings reach the warehouse.
func (c Config) Properties() iceberg.Properties {
	p := iceberg.Properties{"type": c.Type}
	if c.URI != "" {
		p["uri"] = c.URI
	}
	if c.Warehouse != "" {
		p["warehouse"] = c.Warehouse
	}
	if c.Type == TypeSQL {
		p["sql.driver"], p["sql.dialect"] = sqlDriver(c.URI)
		p["init_catalog_tables"] = "true"
	}
	set := func(key, val string) {
		if val != "" {
			p[key] = val
		}
	}
	set(icebergio.S3EndpointURL, c.S3.Endpoint)
	set(icebergio.S3Region, c.S3.Region)
	set(icebergio.S3AccessKeyID, c.S3.AccessKeyID)
	set(icebergio.S3SecretAccessKey, c.S3.SecretAccessKey)
	set(icebergio.S3SessionToken, c.S3.SessionToken)
	keys := make([]string, 0, len(c.Props))
	for k := range c.Props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p[k] = c.Props[k]
	}
	return p
}

// String describes the catalog without credentials, for logs and
// messages: its Identity and warehouse.
func (c Config) String() string {
	r, err := c.Resolved()
	if err != nil {
		return "unconfigured lake"
	}
	id := r.Identity()
	return fmt.Sprintf("%s, warehouse %s", id, id.Warehouse)
}
