package lake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"github.com/aws/aws-sdk-go-v2/aws"

	// Catalog implementations and the S3 file IO register themselves.
	_ "github.com/apache/iceberg-go/catalog/glue"
	_ "github.com/apache/iceberg-go/catalog/rest"
	_ "github.com/apache/iceberg-go/catalog/sql"
	_ "github.com/apache/iceberg-go/io/gocloud/s3"
	_ "modernc.org/sqlite" // database/sql driver "sqlite" for the sql catalog
)

// ErrNoSuchTable is returned (wrapped) for a table the catalog lacks.
var ErrNoSuchTable = catalog.ErrNoSuchTable

// Catalog is an open Iceberg catalog plus what retrain adds on top: per
// table commit serialization within the process, and redo on conflict.
type Catalog struct {
	cat    catalog.Catalog
	cfg    Config
	log    *slog.Logger
	mu     sync.Mutex
	tables map[string]*sync.Mutex // per-table commit locks
}

// Open opens the catalog a config names. For the dev stack's sql catalog it
// creates the data dir and warehouse folder first.
func Open(ctx context.Context, cfg Config, log *slog.Logger) (*Catalog, error) {
	if log == nil {
		log = slog.Default()
	}
	r, err := cfg.Resolved()
	if err != nil {
		return nil, err
	}
	if r.Type == TypeSQL {
		if err := mkLocalDirs(r); err != nil {
			return nil, catalogError(r, "cannot be set up", err)
		}
		if IsPostgresURI(r.URI) {
			if err := pingPostgres(ctx, r); err != nil {
				return nil, err
			}
		}
	}
	var s3cfg *aws.Config
	if r.onS3() || r.Type == TypeREST {
		// Before the catalog, which a failure here would leave open.
		if s3cfg, err = r.awsConfig(ctx, log); err != nil {
			return nil, err
		}
	}
	cat, err := catalog.Load(ctx, r.Name, r.Properties())
	if err != nil {
		return nil, catalogError(r, "cannot be opened", err)
	}
	if s3cfg != nil {
		s3c := &s3Catalog{Catalog: cat, aws: s3cfg}
		// The read layer's client holds the catalog's endpoint and
		// credentials; a rest catalog's tables may each get their own
		// (vended), which iceberg-go's IO lays over s3cfg and the layer
		// would not see.
		if !r.S3.Read.Disabled && r.onS3() {
			s3c.reads = newS3Reads(s3cfg, r.S3.Endpoint, r.Props, r.S3.Read, log)
		}
		cat = s3c
	}
	return &Catalog{cat: cat, cfg: r, log: log, tables: map[string]*sync.Mutex{}}, nil
}

func mkLocalDirs(c Config) error {
	if p, ok := strings.CutPrefix(c.URI, "file:"); ok {
		if i := strings.IndexByte(p, '?'); i >= 0 {
			p = p[:i]
		}
		if i := strings.LastIndexByte(p, '/'); i > 0 {
			if err := os.MkdirAll(p[:i], 0o755); err != nil {
				return err
			}
		}
	}
	if p, ok := strings.CutPrefix(c.Warehouse, "file://"); ok {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("warehouse: %w", err)
		}
	}
	return nil
}

// Config returns the resolved configuration the catalog was opened with.
func (c *Catalog) Config() Config { return c.cfg }

// Iceberg returns the underlying iceberg-go catalog.
func (c *Catalog) Iceberg() catalog.Catalog { return c.cat }

// Close releases the catalog's resources (the SQLite pool).
func (c *Catalog) Close() error {
	if cl, ok := c.cat.(interface{ Close() error }); ok {
		return cl.Close()
	}
	return nil
}

// Ident parses "ns.table" (or "a.b.table") into an identifier.
func Ident(name string) (table.Identifier, error) {
	parts := strings.Split(strings.TrimSpace(name), ".")
	if len(parts) < 2 {
		return nil, fmt.Errorf("table name %q: want namespace.table", name)
	}
	for _, p := range parts {
		if p == "" {
			return nil, fmt.Errorf("table name %q: empty part", name)
		}
	}
	return table.Identifier(parts), nil
}

// Name is the dotted form of an identifier.
func Name(id table.Identifier) string { return strings.Join(id, ".") }

// Load loads a table by dotted name. A missing table is an error wrapping
// ErrNoSuchTable whose message names the table.
func (c *Catalog) Load(ctx context.Context, name string) (*table.Table, error) {
	id, err := Ident(name)
	if err != nil {
		return nil, err
	}
	tbl, err := c.cat.LoadTable(ctx, id)
	if err != nil {
		if errors.Is(err, catalog.ErrNoSuchTable) {
			return nil, fmt.Errorf("table %s does not exist: %w", name, ErrNoSuchTable)
		}
		return nil, fmt.Errorf("load table %s: %w", name, err)
	}
	return tbl, nil
}

// Exists reports whether a table exists.
func (c *Catalog) Exists(ctx context.Context, name string) (bool, error) {
	id, err := Ident(name)
	if err != nil {
		return false, err
	}
	return c.cat.CheckTableExists(ctx, id)
}

// TableSpec is what CreateTable needs beyond the schema.
type TableSpec struct {
	Partition  *iceberg.PartitionSpec // nil: unpartitioned
	SortOrder  *table.SortOrder       // nil: unsorted
	Properties iceberg.Properties
}

// CreateTable creates a table (and its namespace if missing). Field ids of
// the schema are reassigned by the catalog; read them back from the table.
func (c *Catalog) CreateTable(ctx context.Context, name string, schema *iceberg.Schema, spec TableSpec) (*table.Table, error) {
	id, err := Ident(name)
	if err != nil {
		return nil, err
	}
	ns := catalog.NamespaceFromIdent(id)
	var exists bool
	err = retrySerialization(ctx, func() (err error) {
		exists, err = c.cat.CheckNamespaceExists(ctx, ns)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("check namespace %s: %w", strings.Join(ns, "."), err)
	}
	if !exists {
		err := retrySerialization(ctx, func() error { return c.cat.CreateNamespace(ctx, ns, nil) })
		if err != nil && !errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
			return nil, fmt.Errorf("create namespace %s: %w", strings.Join(ns, "."), err)
		}
	}
	var opts []catalog.CreateTableOpt
	if spec.Partition != nil {
		opts = append(opts, catalog.WithPartitionSpec(spec.Partition))
	}
	if spec.SortOrder != nil {
		opts = append(opts, catalog.WithSortOrder(*spec.SortOrder))
	}
	props := iceberg.Properties{"format-version": "2"}
	for k, v := range spec.Properties {
		props[k] = v
	}
	opts = append(opts, catalog.WithProperties(props))
	var tbl *table.Table
	err = retrySerialization(ctx, func() (err error) {
		tbl, err = c.cat.CreateTable(ctx, id, schema, opts...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create table %s: %w", name, err)
	}
	return tbl, nil
}

// DropTable drops a table if it exists (its files stay; they may still be
// referenced by readers holding the old metadata).
func (c *Catalog) DropTable(ctx context.Context, name string) error {
	id, err := Ident(name)
	if err != nil {
		return err
	}
	if err := c.cat.DropTable(ctx, id); err != nil && !errors.Is(err, catalog.ErrNoSuchTable) {
		return fmt.Errorf("drop table %s: %w", name, err)
	}
	return nil
}

// lock returns the commit lock of a table.
func (c *Catalog) lock(name string) *sync.Mutex {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.tables[name]
	if !ok {
		m = &sync.Mutex{}
		c.tables[name] = m
	}
	return m
}

// Lazy opens a catalog on first use and keeps it. A failed open is not
// remembered, so a worker started before its catalog was reachable
// recovers on the next step.
type Lazy struct {
	cfg Config
	log *slog.Logger
	mu  sync.Mutex
	cat *Catalog
}

// NewLazy returns a Lazy for cfg.
func NewLazy(cfg Config, log *slog.Logger) *Lazy { return &Lazy{cfg: cfg, log: log} }

// Configured reports whether there is a catalog to open at all.
func (l *Lazy) Configured() bool { return l != nil && l.cfg.Configured() }

// Catalog opens the catalog if it is not open yet.
func (l *Lazy) Catalog(ctx context.Context) (*Catalog, error) {
	if l == nil {
		return nil, errors.New("lake: no catalog configured for this worker")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cat != nil {
		return l.cat, nil
	}
	if !l.cfg.Configured() {
		return nil, errors.New("lake: no catalog configured for this worker (set --data-dir, or --catalog-uri and --warehouse)")
	}
	cat, err := Open(ctx, l.cfg, l.log)
	if err != nil {
		return nil, err
	}
	l.cat = cat
	return cat, nil
}

// Close closes the catalog if it was opened.
func (l *Lazy) Close() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cat == nil {
		return nil
	}
	err := l.cat.Close()
	l.cat = nil
	return err
}
