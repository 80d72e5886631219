package checkpoint

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/parquet-go/parquet-go"

	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/s3store"
)

// checkpointFileColumns opens the first Parquet file of a checkpoint
// node's dataset and returns its top-level column names, as a reader of
// the file sees them.
func checkpointFileColumns(t *testing.T, st *s3store.Store, run string, out Outputs) []string {
	t.Helper()
	ctx := context.Background()
	m, err := checkpoint.Load(ctx, st, checkpoint.Key{Pipeline: "train", Run: run, Node: "features"}, out.Fingerprint)
	if err != nil {
		t.Fatal(err)
	}
	ds, _ := m.Dataset(out.Dataset)
	b, _, err := st.GetBytes(ctx, ds.Files[0].Key)
	if err != nil {
		t.Fatal(err)
	}
	f, err := parquet.OpenFile(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, field := range f.Schema().Fields() {
		names = append(names, field.Name())
	}
	return names
}

// TestCheckpointKeepsColumnOrder: the Parquet files and the `columns`
// output keep the source's column order, whether the types are inferred
// or declared (a mapping, which has no order of its own) and whether the
// CSV comes from files or streams from a command.
func TestCheckpointKeepsColumnOrder(t *testing.T) {
	t.Parallel()
	c, st, _ := newCheckpoints(t)
	ctx := t.Context()
	dir := t.TempDir()
	src := filepath.Join(dir, "t.csv")
	if err := os.WriteFile(src, []byte("zeta,alpha,mid\n1,x,0.5\n2,y,\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	declared := map[string]any{"alpha": "string", "mid": "double", "zeta": "int64"}
	wantCols := []string{"zeta:int64", "alpha:string", "mid:double"}
	wantNames := []string{"zeta", "alpha", "mid"}
	for _, tc := range []struct {
		name string
		with map[string]any
	}{
		{"inferred file", map[string]any{"source": src}},
		{"declared file", map[string]any{"source": src, "columns": declared}},
		{"inferred command", map[string]any{"command": []any{"cat", src}}},
		{"declared command", map[string]any{"command": []any{"cat", src}, "columns": declared}},
	} {
		out, err := run(ctx, c, checkpointInput("run-order", tc.with))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := out.Columns; !slices.Equal(got, wantCols) {
			t.Errorf("%s: columns %v, want %v", tc.name, got, wantCols)
		}
		if got := checkpointFileColumns(t, st, "run-order", out); !slices.Equal(got, wantNames) {
			t.Errorf("%s: Parquet file columns %v, want %v", tc.name, got, wantNames)
		}
		if out.Rows != 2 {
			t.Errorf("%s: %v rows, want 2", tc.name, out.Rows)
		}
	}
}

// writeLakeStyleParquet writes a Parquet file the way iceberg-go writes the
// lake's data files (arrow-go's pqarrow): columns not in name order and a
// list of int64 stored as optional group (LIST) { repeated group list {
// required int64 element } }.
func writeLakeStyleParquet(t *testing.T, path string) {
	t.Helper()
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "user_id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "u_recent_ads", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Int64), Nullable: true},
		{Name: "ctr", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "ad", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	b.Field(0).(*array.Int64Builder).AppendValues([]int64{7, 8}, nil)
	lb := b.Field(1).(*array.ListBuilder)
	vb := lb.ValueBuilder().(*array.Int64Builder)
	lb.Append(true)
	vb.AppendValues([]int64{101, 102, 103}, nil)
	lb.AppendNull()
	b.Field(2).(*array.Float64Builder).AppendValues([]float64{0.25, 0.5}, nil)
	b.Field(3).(*array.StringBuilder).AppendValues([]string{"a", "b"}, nil)
	rec := b.NewRecordBatch()
	defer rec.Release()

	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pqarrow.NewFileWriter(schema, f, nil, pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCheckpointParquetListColumn: a Parquet source keeps its schema's
// column order, and a list column is reported by its own name and element
// type rather than as the leaf Parquet calls "element".
func TestCheckpointParquetListColumn(t *testing.T) {
	t.Parallel()
	c, st, _ := newCheckpoints(t)
	src := filepath.Join(t.TempDir(), "part-0.parquet")
	writeLakeStyleParquet(t, src)

	out, err := run(t.Context(), c, checkpointInput("run-list", map[string]any{"source": src}))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"user_id:int64", "u_recent_ads:list<int64>", "ctr:double", "ad:string"}
	if got := out.Columns; !slices.Equal(got, want) {
		t.Fatalf("columns %v, want %v", got, want)
	}
	if got := checkpointFileColumns(t, st, "run-list", out); !slices.Equal(got, []string{"user_id", "u_recent_ads", "ctr", "ad"}) {
		t.Fatalf("Parquet file columns %v", got)
	}
	type lakeRow struct {
		UserID    int64    `parquet:"user_id"`
		RecentAds []int64  `parquet:"u_recent_ads,list"`
		CTR       *float64 `parquet:"ctr,optional"`
		Ad        *string  `parquet:"ad,optional"`
	}
	rows, err := checkpoint.ReadAll[lakeRow](t.Context(), st, checkpoint.Ref{Manifest: out.Manifest, Dataset: out.Dataset})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || !slices.Equal(rows[0].RecentAds, []int64{101, 102, 103}) || len(rows[1].RecentAds) != 0 || *rows[1].Ad != "b" {
		t.Fatalf("read back %+v", rows)
	}
}

// TestColumnStringsOldManifest: a manifest written before columns were
// recorded in it still yields columns, from its schema text.
func TestColumnStringsOldManifest(t *testing.T) {
	ds := checkpoint.Dataset{Schema: "message row {\n\toptional int64 id (INT(64,true));\n\toptional binary name (STRING);\n\toptional double score;\n}"}
	if got, want := columnStrings(ds), []string{"id:int64", "name:string", "score:double"}; !slices.Equal(got, want) {
		t.Fatalf("columnStrings = %v, want %v", got, want)
	}
	ds.Columns = []checkpoint.Column{{Name: "u_recent_ads", Type: "list<int64>"}}
	if got := columnStrings(ds); !slices.Equal(got, []string{"u_recent_ads:list<int64>"}) {
		t.Fatalf("columnStrings = %v: recorded columns come first", got)
	}
}
