// Package lakeimport loads Parquet files into an Iceberg table of the lake
// in one snapshot: the way into the two-stage feature backfill for a team
// whose data starts as files.
//
// Every file's schema is read (footers only) and checked before anything
// is written: against the first file's, and against the table's when the
// table exists. The rows then stream file by file, batch by batch, into
// the table's data files; one commit makes them visible. A failure before
// that commit leaves the table as it was (a table this import created is
// dropped again).
package lakeimport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/hivepath"
	"github.com/retrain-ml/retrain/internal/lake"
)

// Mode says what happens to rows a table already holds.
type Mode string

const (
	Append    Mode = "append"    // add the files' rows
	Overwrite Mode = "overwrite" // the files' rows replace every row
)

// Options is one import.
type Options struct {
	Table string   // namespace.table
	From  []string // local files, folders (every .parquet below) or globs
	// PartitionBy partitions a table the import creates; for an existing
	// table it must be empty or name the table's own spec.
	PartitionBy []PartitionField
	Mode        Mode
	BatchRows   int64 // rows per record batch read; 0: 64Ki
	// DateColumn is the key of the Hive-style folders (date=2026-11-21/)
	// that reads as a DATE column; other keys read as strings. "":
	// DefaultDateColumn.
	DateColumn string
	// PrimaryKey are the identifier fields (Iceberg's primary key) of a
	// table the import creates: stage_features needs one on the training
	// table. For an existing table it must be empty or the table's own.
	PrimaryKey []string
}

// Result is what an import did.
type Result struct {
	Table      string
	Created    bool
	SnapshotID int64
	Files      int // input files
	DataFiles  int // data files written into the table
	Rows       int64
	Bytes      int64 // input bytes
	Elapsed    time.Duration
}

// ErrBadInput marks errors of the files or options, which no retry fixes.
var ErrBadInput = errors.New("bad input")

// Import loads opts.From into opts.Table.
func Import(ctx context.Context, cat *lake.Catalog, opts Options, log *slog.Logger) (*Result, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	began := time.Now()
	if opts.Mode == "" {
		opts.Mode = Append
	}
	if opts.Mode != Append && opts.Mode != Overwrite {
		return nil, fmt.Errorf("%w: mode %q: want append or overwrite", ErrBadInput, opts.Mode)
	}
	if _, err := lake.Ident(opts.Table); err != nil {
		return nil, fmt.Errorf("%w: table %q: %v", ErrBadInput, opts.Table, err)
	}
	files, err := Expand(opts.From)
	if err != nil {
		return nil, err
	}
	schema, rows, size, err := checkFiles(files)
	if err != nil {
		return nil, err
	}
	if opts.DateColumn == "" {
		opts.DateColumn = DefaultDateColumn
	}
	folders, err := folderColumns(files, schema, opts.DateColumn)
	if err != nil {
		return nil, err
	}
	schema = arrow.NewSchema(append(slices.Clone(schema.Fields()), folders...), nil)
	res := &Result{Table: opts.Table, Files: len(files), Rows: rows, Bytes: size}

	exists, err := cat.Exists(ctx, opts.Table)
	if err != nil {
		return nil, fmt.Errorf("look up table %s: %w", opts.Table, err)
	}
	var tbl *table.Table
	if exists {
		if tbl, err = cat.Load(ctx, opts.Table); err != nil {
			return nil, err
		}
		if err := checkAgainstTable(tbl, schema, opts.PartitionBy, files[0]); err != nil {
			return nil, err
		}
		if err := checkPrimaryKey(tbl, opts.PrimaryKey); err != nil {
			return nil, err
		}
	} else {
		ischema, err := table.ArrowSchemaToIcebergWithFreshIDs(schema, true)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: a column type Iceberg cannot hold: %v", ErrBadInput, files[0], err)
		}
		if ischema, err = withPrimaryKey(ischema, opts.PrimaryKey, files[0]); err != nil {
			return nil, err
		}
		spec, err := Spec(opts.PartitionBy, ischema)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadInput, err)
		}
		if tbl, err = cat.CreateTable(ctx, opts.Table, ischema, lake.TableSpec{Partition: spec}); err != nil {
			return nil, err
		}
		res.Created = true
		log.Info("created table", "table", opts.Table, "columns", len(schema.Fields()), "partition_by", describe(opts.PartitionBy))
	}
	undo := func(err error) (*Result, error) {
		if res.Created {
			if derr := cat.DropTable(context.WithoutCancel(ctx), opts.Table); derr != nil {
				err = errors.Join(err, fmt.Errorf("drop the table this import created: %w", derr))
			}
		}
		return nil, err
	}

	// The table's required columns (a primary key's among them) are
	// written as such: a null in one fails the import before its commit.
	required := requiredColumns(tbl)
	schema = withRequired(schema, required)

	batch := opts.BatchRows
	if batch <= 0 {
		batch = 64 << 10
	}
	var read int64
	dataFiles, err := lake.WriteFiles(ctx, tbl, schema, records(ctx, files, schema, required, batch, &read))
	if err != nil {
		return undo(err)
	}
	if read != rows {
		return undo(fmt.Errorf("read %d rows where the footers promised %d: a file changed during the import", read, rows))
	}
	res.DataFiles = len(dataFiles)

	props := iceberg.Properties{"retrain.import.files": fmt.Sprint(len(files)), "retrain.import.mode": string(opts.Mode)}
	tbl, err = cat.Update(ctx, opts.Table, func(ctx context.Context, tbl *table.Table, tx *table.Transaction) error {
		var del []iceberg.DataFile
		if opts.Mode == Overwrite && tbl.CurrentSnapshot() != nil {
			if del, err = lake.FilesOf(ctx, lake.Scan(ctx, tbl)); err != nil {
				return err
			}
		}
		return lake.ReplaceFiles(ctx, tx, del, dataFiles, props)
	})
	if err != nil {
		return undo(fmt.Errorf("commit the import into %s: %w", opts.Table, err))
	}
	if snap := tbl.CurrentSnapshot(); snap != nil {
		res.SnapshotID = snap.SnapshotID
	}
	res.Elapsed = time.Since(began)
	return res, nil
}

// Expand lists the Parquet files the patterns name: a file, a folder
// (every .parquet below it) or a glob; sorted, without duplicates. A
// pattern that matches nothing is an error naming it.
func Expand(patterns []string) ([]string, error) {
	if len(patterns) == 0 {
		return nil, fmt.Errorf("%w: --from: give at least one file, folder or glob", ErrBadInput)
	}
	seen := map[string]bool{}
	var out []string
	for _, p := range patterns {
		if strings.HasPrefix(p, "s3://") {
			return nil, fmt.Errorf("%w: --from %s: import reads local files; copy the objects first, or read them with split's files:", ErrBadInput, p)
		}
		var got []string
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			err := filepath.WalkDir(p, func(q string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() && strings.HasSuffix(q, ".parquet") {
					got = append(got, q)
				}
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("--from %s: %w", p, err)
			}
		} else {
			m, err := filepath.Glob(p)
			if err != nil {
				return nil, fmt.Errorf("%w: --from %s: %v", ErrBadInput, p, err)
			}
			for _, q := range m {
				if st, err := os.Stat(q); err == nil && st.Mode().IsRegular() {
					got = append(got, q)
				}
			}
		}
		if len(got) == 0 {
			return nil, fmt.Errorf("%w: --from %s matches no Parquet file", ErrBadInput, p)
		}
		for _, q := range got {
			if !seen[q] {
				seen[q] = true
				out = append(out, q)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// checkFiles reads every file's footer and returns the first file's
// schema (without Parquet metadata), the rows and bytes of all. A file
// whose columns differ from the first one's is an error naming both.
func checkFiles(files []string) (*arrow.Schema, int64, int64, error) {
	var (
		first      *arrow.Schema
		rows, size int64
	)
	for _, name := range files {
		sch, n, sz, err := footer(name)
		if err != nil {
			return nil, 0, 0, err
		}
		rows += n
		size += sz
		if first == nil {
			first = sch
			continue
		}
		if diff := schemaDiff(first, sch); diff != "" {
			return nil, 0, 0, fmt.Errorf("%w: %s: its schema differs from %s's: %s; nothing was imported", ErrBadInput, name, files[0], diff)
		}
	}
	return first, rows, size, nil
}

func footer(name string) (*arrow.Schema, int64, int64, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("%w: open %s: %v", ErrBadInput, name, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, 0, err
	}
	pf, err := file.NewParquetReader(f)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("%w: %s is not a Parquet file: %v", ErrBadInput, name, err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("%w: %s: %v", ErrBadInput, name, err)
	}
	sch, err := fr.Schema()
	if err != nil {
		return nil, 0, 0, fmt.Errorf("%w: %s: %v", ErrBadInput, name, err)
	}
	return plain(sch), pf.NumRows(), st.Size(), nil
}

// plain drops the schema's metadata (Parquet field ids of another
// writer's table would otherwise be matched against this table's ids).
func plain(sch *arrow.Schema) *arrow.Schema {
	fields := make([]arrow.Field, sch.NumFields())
	for i, f := range sch.Fields() {
		fields[i] = arrow.Field{Name: f.Name, Type: f.Type, Nullable: f.Nullable}
	}
	return arrow.NewSchema(fields, nil)
}

// schemaDiff says how b's columns differ from a's; "" when they agree.
func schemaDiff(a, b *arrow.Schema) string {
	var diffs []string
	for _, f := range a.Fields() {
		i := b.FieldIndices(f.Name)
		if len(i) == 0 {
			diffs = append(diffs, fmt.Sprintf("column %q is missing", f.Name))
			continue
		}
		if g := b.Field(i[0]); !arrow.TypeEqual(f.Type, g.Type) {
			diffs = append(diffs, fmt.Sprintf("column %q is %s, not %s", f.Name, g.Type, f.Type))
		}
	}
	for _, g := range b.Fields() {
		if len(a.FieldIndices(g.Name)) == 0 {
			diffs = append(diffs, fmt.Sprintf("it has a column %q the first file lacks", g.Name))
		}
	}
	for i := 0; len(diffs) == 0 && i < a.NumFields(); i++ {
		if a.Field(i).Name != b.Field(i).Name {
			diffs = append(diffs, fmt.Sprintf("its columns are in another order (%s)", strings.Join(names(b), ", ")))
		}
	}
	return strings.Join(diffs, "; ")
}

func names(s *arrow.Schema) []string {
	out := make([]string, s.NumFields())
	for i, f := range s.Fields() {
		out[i] = f.Name
	}
	return out
}

// checkAgainstTable refuses files whose columns the table cannot take
// (a column it lacks, or of another type), and a --partition-by that is
// not the table's spec.
func checkAgainstTable(tbl *table.Table, files *arrow.Schema, by []PartitionField, first string) error {
	want, err := table.SchemaToArrowSchema(tbl.Schema(), nil, false, false)
	if err != nil {
		return fmt.Errorf("table %s's schema: %w", lake.Name(tbl.Identifier()), err)
	}
	var diffs []string
	for _, f := range files.Fields() {
		i := want.FieldIndices(f.Name)
		if len(i) == 0 {
			diffs = append(diffs, fmt.Sprintf("column %q is not in the table", f.Name))
			continue
		}
		if g := want.Field(i[0]); !compatible(f.Type, g.Type) {
			diffs = append(diffs, fmt.Sprintf("column %q is %s, the table's is %s", f.Name, f.Type, g.Type))
		}
	}
	for _, g := range want.Fields() {
		col, _ := tbl.Schema().FindFieldByName(g.Name)
		if len(files.FieldIndices(g.Name)) == 0 && col.Required {
			diffs = append(diffs, fmt.Sprintf("the table's required column %q is missing", g.Name))
		}
	}
	if len(diffs) > 0 {
		return fmt.Errorf("%w: %s does not fit table %s: %s; nothing was imported", ErrBadInput, first, lake.Name(tbl.Identifier()), strings.Join(diffs, "; "))
	}
	if len(by) > 0 {
		spec, err := Spec(by, tbl.Schema())
		if err != nil {
			return fmt.Errorf("%w: %v", ErrBadInput, err)
		}
		asked, err := lake.SpecFields(tbl.Schema(), *spec)
		if err != nil {
			return err
		}
		have, err := lake.SpecFields(tbl.Schema(), tbl.Spec())
		if err != nil {
			return err
		}
		if !lake.SameSpec(asked, have) {
			return fmt.Errorf("%w: --partition-by %s is not table %s's partitioning (%s): leave --partition-by out to import into it as it is", ErrBadInput, lake.DescribeSpec(asked), lake.Name(tbl.Identifier()), lake.DescribeSpec(have))
		}
	}
	return nil
}

// compatible: what Iceberg promotes on write (int to long, float to
// double, timestamp units the table downcasts) or the same type.
func compatible(file, tbl arrow.DataType) bool {
	if arrow.TypeEqual(file, tbl) {
		return true
	}
	switch file.ID() {
	case arrow.INT8, arrow.INT16, arrow.INT32:
		return tbl.ID() == arrow.INT32 || tbl.ID() == arrow.INT64
	case arrow.FLOAT32:
		return tbl.ID() == arrow.FLOAT64
	case arrow.TIMESTAMP:
		return tbl.ID() == arrow.TIMESTAMP
	case arrow.STRING, arrow.LARGE_STRING:
		return tbl.ID() == arrow.STRING || tbl.ID() == arrow.LARGE_STRING
	case arrow.BINARY, arrow.LARGE_BINARY:
		return tbl.ID() == arrow.BINARY || tbl.ID() == arrow.LARGE_BINARY
	}
	return false
}

func describe(by []PartitionField) string {
	if len(by) == 0 {
		return "none"
	}
	parts := make([]string, len(by))
	for i, f := range by {
		parts[i] = fmt.Sprintf("%s(%s)", f.Transform, f.Column)
	}
	return strings.Join(parts, ", ")
}

// records streams every file's rows as batches of schema (the first
// file's column order), counting them in read.
func records(ctx context.Context, files []string, schema *arrow.Schema, key []string, batch int64, read *int64) iter.Seq2[arrow.RecordBatch, error] {
	return func(yield func(arrow.RecordBatch, error) bool) {
		for _, name := range files {
			if !readFile(ctx, name, schema, key, batch, read, yield) {
				return
			}
		}
	}
}

func readFile(ctx context.Context, name string, schema *arrow.Schema, key []string, batch int64, read *int64, yield func(arrow.RecordBatch, error) bool) bool {
	fail := func(err error) bool {
		yield(nil, fmt.Errorf("read %s: %w", name, err))
		return false
	}
	parts := hivepath.Parts(name)
	f, err := os.Open(name)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	pf, err := file.NewParquetReader(f)
	if err != nil {
		return fail(err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: batch}, memory.DefaultAllocator)
	if err != nil {
		return fail(err)
	}
	rr, err := fr.GetRecordReader(ctx, nil, nil)
	if err != nil {
		return fail(err)
	}
	defer rr.Release()
	for rr.Next() {
		rec := rr.RecordBatch()
		// The file's columns in the first file's order (checkFiles made
		// sure every file has them, with the same types).
		// A column no file holds is one of its key=value folders
		// (folderColumns checked every file sits under them).
		cols := make([]arrow.Array, schema.NumFields())
		var made []arrow.Array
		for i, f := range schema.Fields() {
			if idx := rec.Schema().FieldIndices(f.Name); len(idx) > 0 {
				cols[i] = rec.Column(idx[0])
				continue
			}
			v, ok := hivepath.Value(parts, f.Name)
			if !ok {
				return fail(fmt.Errorf("column %q is missing", f.Name))
			}
			col, err := hivepath.Column(f, v, int(rec.NumRows()))
			if err != nil {
				return fail(fmt.Errorf("folder %s=%s/: %w", f.Name, v, err))
			}
			cols[i] = col
			made = append(made, col)
		}
		out := array.NewRecordBatch(schema, cols, rec.NumRows())
		for _, c := range made {
			c.Release()
		}
		if err := keyNulls(out, key); err != nil {
			out.Release()
			return fail(err)
		}
		*read += rec.NumRows()
		if !yield(out, nil) {
			return false
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return fail(err)
	}
	return true
}
