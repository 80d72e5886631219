package split

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/activities/internal/objects"
	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/nodetype"
)

// dayRecords reads the rows of ml.training at the env's snapshot whose
// date is d, as the table holds them.
func (e *splitEnv) dayRecords(t *testing.T, d int) []arrow.RecordBatch {
	t.Helper()
	ctx := context.Background()
	cat, err := e.splits.Catalog.Catalog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := cat.Load(ctx, "ml.training")
	if err != nil {
		t.Fatal(err)
	}
	dd := int32(demodata.DefaultStart + backfill.Day(d))
	_, recs, err := lake.Scan(ctx, tbl, table.WithRowFilter(lake.DateRange("date", dd, dd))).ToArrowRecords(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []arrow.RecordBatch
	for rec, err := range recs {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rec)
	}
	return out
}

// parquetBytes writes records as one Parquet file, rowGroup rows a row
// group (0: one row group), the date column as YYYY-MM-DD strings when
// stringDates.
func parquetBytes(t *testing.T, recs []arrow.RecordBatch, rowGroup int64, stringDates bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w *pqarrow.FileWriter
	props := parquet.NewWriterProperties(parquet.WithMaxRowGroupLength(max(rowGroup, 1<<20)), parquet.WithStats(true))
	for _, rec := range recs {
		if stringDates {
			rec = withStringDates(t, rec)
		}
		if w == nil {
			var err error
			if w, err = pqarrow.NewFileWriter(rec.Schema(), &buf, props, pqarrow.DefaultWriterProps()); err != nil {
				t.Fatal(err)
			}
		}
		if rowGroup > 0 {
			w.NewBufferedRowGroup()
		}
		if err := w.WriteBuffered(rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// withStringDates is rec with its date column as YYYY-MM-DD strings.
func withStringDates(t *testing.T, rec arrow.RecordBatch) arrow.RecordBatch {
	idx := rec.Schema().FieldIndices("date")[0]
	b := array.NewStringBuilder(memory.DefaultAllocator)
	dates := rec.Column(idx).(*array.Date32)
	for i := range dates.Len() {
		b.Append(backfill.Day(dates.Value(i)).String())
	}
	cols := append([]arrow.Array(nil), rec.Columns()...)
	cols[idx] = b.NewArray()
	fields := append([]arrow.Field(nil), rec.Schema().Fields()...)
	fields[idx] = arrow.Field{Name: "date", Type: arrow.BinaryTypes.String, Nullable: true}
	return array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, rec.NumRows())
}

// runFiles runs a split of files with the env's features.
func (e *splitEnv) runFiles(t *testing.T, run string, with map[string]any) (map[string]any, error) {
	t.Helper()
	w := map[string]any{"dense": []any{"u_activity", "u_sessions"}, "sparse": []any{"user_id", "ad_id"}, "max_null_rate": 1.0}
	for k, v := range with {
		w[k] = v
	}
	if err := checkSplit(w); err != nil {
		return nil, err
	}
	return nodetest.Run(t, e.splits.Run, nodetype.Input{Pipeline: "test", RunID: run, Node: "split", Type: "split", With: w}, nil)
}

func (e *splitEnv) checksums(t *testing.T, out map[string]any) [2]Checksum {
	t.Helper()
	var cs [2]Checksum
	for i, name := range []string{TrainDataset, EvalDataset} {
		c, err := DatasetChecksum(context.Background(), e.splits.Store, out["uri"].(string), name)
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = c
	}
	return cs
}

// TestSplitFiles: a split of Parquet files, one per date in date= folders
// on local disk and in the object store, holds exactly the rows the split
// of the same rows in an Iceberg table holds; files outside the window are
// never opened (they are not Parquet: opening one would fail).
func TestSplitFiles(t *testing.T) {
	e := newSplitEnv(t)
	ctx := context.Background()
	window := map[string]any{"start_date": day(1), "end_date": day(4), "eval_days": 1, "max_null_rate": 1.0}
	want, err := e.run(t, "table", window)
	if err != nil {
		t.Fatal(err)
	}
	wantSums := e.checksums(t, want)

	dir := t.TempDir()
	for d := range 6 {
		b := []byte("not parquet: outside the window, never to be opened")
		if d >= 1 && d <= 4 {
			b = parquetBytes(t, e.dayRecords(t, d), 0, false)
		}
		p := filepath.Join(dir, "date="+day(d), "part-0.parquet")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := e.splits.Store.PutBytes(ctx, "raw/date="+day(d)+"/part-0.parquet", b); err != nil {
			t.Fatal(err)
		}
	}
	e.splits.Env = progenv.Policy{AllowPaths: []string{dir}}
	for name, files := range map[string]any{
		"local":  filepath.Join(dir, "*", "*.parquet"),
		"folder": dir + "/",
		"s3":     []any{objects.KeyURI(e.splits.Store, "raw/*/*.parquet")},
	} {
		t.Run(name, func(t *testing.T) {
			w := map[string]any{"files": files}
			for k, v := range window {
				w[k] = v
			}
			out, err := e.runFiles(t, "files-"+name, w)
			if err != nil {
				t.Fatal(err)
			}
			if got := e.checksums(t, out); got != wantSums {
				t.Errorf("checksums %v, want the table's %v", got, wantSums)
			}
			if strs(out["train_dates"])[0] != day(1) || strs(out["eval_dates"])[0] != day(4) {
				t.Errorf("dates %v %v", out["train_dates"], out["eval_dates"])
			}
			f := out["files"].(map[string]any)
			if f["matched"] != 6.0 || f["pruned"] != 2.0 || f["read"] != 4.0 || len(f["files"].([]any)) != 4 {
				t.Errorf("files %v: want 6 matched, 2 pruned by folder, 4 read", f)
			}
			if s := out["summary"].(string); !strings.Contains(s, "4 of 6 files read") {
				t.Errorf("summary %q", s)
			}
		})
	}
}

// TestSplitFilesRowGroups: one file holding every date as YYYY-MM-DD
// strings, a row group per date: the row groups outside the window are
// pruned by their statistics, and the split is the table's.
func TestSplitFilesRowGroups(t *testing.T) {
	e := newSplitEnv(t)
	window := map[string]any{"start_date": day(1), "end_date": day(4), "eval_days": 1, "max_null_rate": 1.0}
	want, err := e.run(t, "table", window)
	if err != nil {
		t.Fatal(err)
	}
	var recs []arrow.RecordBatch
	for d := range 6 {
		recs = append(recs, e.dayRecords(t, d)...)
	}
	p := filepath.Join(t.TempDir(), "all.parquet")
	if err := os.WriteFile(p, parquetBytes(t, recs, 1, true), 0o644); err != nil {
		t.Fatal(err)
	}
	w := map[string]any{"files": p}
	for k, v := range window {
		w[k] = v
	}
	out, err := e.runFiles(t, "files", w)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := e.checksums(t, out), e.checksums(t, want); got != want {
		t.Errorf("checksums %v, want the table's %v", got, want)
	}
	f := out["files"].(map[string]any)
	if f["read"] != 1.0 || f["row_groups_pruned"].(float64) < 2 || f["row_groups"].(float64) < 4 {
		t.Errorf("files %v: want row groups of 2 dates pruned", f)
	}
}

// TestSplitFilesBadInput: what cannot be split from files fails as
// BadInput with a message naming the mistake, before anything is written.
func TestSplitFilesBadInput(t *testing.T) {
	e := newSplitEnv(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "d.parquet")
	if err := os.WriteFile(good, parquetBytes(t, append(e.dayRecords(t, 1), e.dayRecords(t, 2)...), 0, false), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	e.splits.Env = progenv.Policy{AllowPaths: []string{dir}}
	base := map[string]any{"start_date": day(1), "end_date": day(2)}
	for _, c := range []struct {
		name string
		with map[string]any
		want string
	}{
		{"no match", map[string]any{"files": filepath.Join(dir, "*.csv")}, "matches no Parquet file"},
		{"no match s3", map[string]any{"files": objects.KeyURI(e.splits.Store, "nothing/*.parquet")}, "matches no Parquet file"},
		{"missing date column", map[string]any{"files": good, "date_column": "day"}, `has no date column "day"`},
		{"wrong date type", map[string]any{"files": good, "date_column": "user_id"}, `date column "user_id" is int64: want a DATE, a TIMESTAMP`},
		{"outside allow-paths", map[string]any{"files": filepath.Join(outside, "*.parquet")}, "is outside the folders this worker allows"},
		{"outside the store", map[string]any{"files": "s3://another-bucket/x/*.parquet"}, "outside this worker's object store"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := map[string]any{}
			for k, v := range base {
				w[k] = v
			}
			for k, v := range c.with {
				w[k] = v
			}
			_, err := e.runFiles(t, "bad", w)
			if nodetest.ErrType(err) != errtype.BadInput || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v (%s), want BadInput with %q", err, nodetest.ErrType(err), c.want)
			}
		})
	}
	// Nothing was written for any of them.
	for k, err := range e.splits.Store.List(context.Background(), "checkpoints/") {
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(k.Key, "/bad/") {
			t.Errorf("a failed split wrote %s", k.Key)
		}
	}
	// Validation refuses both sources, neither, and join or snapshot_id
	// with files, naming the fields.
	for _, c := range []struct {
		with map[string]any
		want string
	}{
		{map[string]any{"table": "ml.training", "files": good}, "give table (an Iceberg table) or files (Parquet files), not both"},
		{map[string]any{}, "give table (namespace.table of the training data) or files"},
		{map[string]any{"files": good, "join": []any{map[string]any{"table": "a"}}}, "a split of files joins files"},
		{map[string]any{"files": good, "snapshot_id": "1"}, "snapshot_id works with table only"},
	} {
		w := map[string]any{"start_date": day(1), "end_date": day(2), "dense": []any{"x"}}
		for k, v := range c.with {
			w[k] = v
		}
		if err := checkSplit(w); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("validation of %v: %v, want %q", c.with, err, c.want)
		}
	}
}
