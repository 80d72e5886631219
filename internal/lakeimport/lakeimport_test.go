package lakeimport_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/internal/lakeimport"
)

var clicks = arrow.NewSchema([]arrow.Field{
	{Name: "user_id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "date", Type: arrow.FixedWidthTypes.Date32},
	{Name: "ctr", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "country", Type: arrow.BinaryTypes.String, Nullable: true},
}, nil)

// day0 is 2026-11-21 as days since the epoch.
const day0 = 20413

// writeDay writes n rows of one day (users from first) as a Parquet file
// under dir/date=.../part.parquet and returns the sum of its user ids.
func writeDay(t *testing.T, dir string, schema *arrow.Schema, day, first, n int) int64 {
	t.Helper()
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	var sum int64
	for i := range n {
		u := int64(first + i)
		sum += u
		for j, f := range schema.Fields() {
			switch f.Name {
			case "user_id":
				b.Field(j).(*array.Int64Builder).Append(u)
			case "date":
				b.Field(j).(*array.Date32Builder).Append(arrow.Date32(day0 + day))
			case "ctr":
				switch fb := b.Field(j).(type) {
				case *array.Float64Builder:
					fb.Append(float64(i%100) / 100)
				case *array.Int64Builder:
					fb.Append(int64(i % 100))
				}
			case "country":
				b.Field(j).(*array.StringBuilder).Append([]string{"de", "fr", "us"}[i%3])
			case "ctr32":
				b.Field(j).(*array.Float32Builder).Append(0.5)
			}
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	p := filepath.Join(dir, fmt.Sprintf("date=2026-11-%02d", 21+day), "part.parquet")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	tbl := array.NewTableFromRecords(schema, []arrow.RecordBatch{rec})
	defer tbl.Release()
	// WriteTable closes f.
	if err := pqarrow.WriteTable(tbl, f, 1000, nil, pqarrow.DefaultWriterProps()); err != nil {
		t.Fatal(err)
	}
	return sum
}

// contents reads the table back: rows, the sum of user_id and snapshots.
func contents(t *testing.T, cat *lake.Catalog, name string) (rows, sum int64, snapshots int) {
	t.Helper()
	ctx := context.Background()
	tbl, err := cat.Load(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	snapshots = len(tbl.Metadata().Snapshots())
	if tbl.CurrentSnapshot() == nil {
		return 0, 0, snapshots
	}
	at, err := lake.Scan(ctx, tbl).ToArrowTable(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer at.Release()
	idx := at.Schema().FieldIndices("user_id")[0]
	for _, c := range at.Column(idx).Data().Chunks() {
		for _, v := range c.(*array.Int64).Int64Values() {
			sum += v
		}
	}
	return at.NumRows(), sum, snapshots
}

func openCatalog(t *testing.T) *lake.Catalog {
	t.Helper()
	cat, err := lake.Open(context.Background(), lake.Config{DataDir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	return cat
}

func TestImportCreatesAppendsAndOverwrites(t *testing.T) {
	ctx := context.Background()
	cat := openCatalog(t)
	dir := t.TempDir()
	var want int64
	for d := range 3 {
		want += writeDay(t, dir, clicks, d, d*1000, 500)
	}
	by, err := lakeimport.ParsePartitionBy("date,bucket(4,user_id)")
	if err != nil {
		t.Fatal(err)
	}
	res, err := lakeimport.Import(ctx, cat, lakeimport.Options{Table: "ml.clicks", From: []string{dir}, PartitionBy: by, BatchRows: 128}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Created || res.Files != 3 || res.Rows != 1500 || res.SnapshotID == 0 {
		t.Fatalf("result %+v", res)
	}
	rows, sum, snaps := contents(t, cat, "ml.clicks")
	if rows != 1500 || sum != want || snaps != 1 {
		t.Fatalf("table holds %d rows (user sum %d) in %d snapshots; want 1500 (%d) in one", rows, sum, snaps, want)
	}
	tbl, _ := cat.Load(ctx, "ml.clicks")
	if spec := tbl.Spec(); spec.NumFields() != 2 {
		t.Errorf("partition spec %s, want date and a bucket of user_id", spec.String())
	}
	if res.DataFiles < 3*2 {
		t.Errorf("%d data files: want at least one per day and bucket present", res.DataFiles)
	}

	// Append a day: a second snapshot, the table's own spec kept.
	more := t.TempDir()
	add := writeDay(t, more, clicks, 3, 9000, 200)
	res, err = lakeimport.Import(ctx, cat, lakeimport.Options{Table: "ml.clicks", From: []string{filepath.Join(more, "*", "*.parquet")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rows, sum, snaps = contents(t, cat, "ml.clicks")
	if res.Created || rows != 1700 || sum != want+add || snaps != 2 {
		t.Fatalf("after append: %d rows (sum %d) in %d snapshots, created %v", rows, sum, snaps, res.Created)
	}

	// Overwrite: only the new files' rows, in one more snapshot.
	if _, err := lakeimport.Import(ctx, cat, lakeimport.Options{Table: "ml.clicks", From: []string{more}, Mode: lakeimport.Overwrite}, nil); err != nil {
		t.Fatal(err)
	}
	rows, sum, snaps = contents(t, cat, "ml.clicks")
	if rows != 200 || sum != add || snaps != 3 {
		t.Fatalf("after overwrite: %d rows (sum %d) in %d snapshots; want 200 (%d) in 3", rows, sum, snaps, add)
	}
}

func TestImportRefusesBeforeWriting(t *testing.T) {
	ctx := context.Background()
	cat := openCatalog(t)
	good := t.TempDir()
	writeDay(t, good, clicks, 0, 0, 100)
	if _, err := lakeimport.Import(ctx, cat, lakeimport.Options{Table: "ml.clicks", From: []string{good}}, nil); err != nil {
		t.Fatal(err)
	}

	// A set whose second file has ctr as int64: the file is named, and
	// neither the existing table nor a new one changes.
	mixed := t.TempDir()
	writeDay(t, mixed, clicks, 0, 0, 10)
	other := arrow.NewSchema([]arrow.Field{
		{Name: "user_id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "date", Type: arrow.FixedWidthTypes.Date32},
		{Name: "ctr", Type: arrow.PrimitiveTypes.Int64},
		{Name: "country", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	writeDay(t, mixed, other, 1, 0, 10)
	bad := filepath.Join(mixed, "date=2026-11-22", "part.parquet")
	for _, table := range []string{"ml.clicks", "ml.fresh"} {
		_, err := lakeimport.Import(ctx, cat, lakeimport.Options{Table: table, From: []string{mixed}}, nil)
		if !errors.Is(err, lakeimport.ErrBadInput) || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), `column "ctr" is int64, not float64`) {
			t.Fatalf("into %s: %v: want a bad-input error naming %s and the column", table, err, bad)
		}
	}
	if rows, _, snaps := contents(t, cat, "ml.clicks"); rows != 100 || snaps != 1 {
		t.Errorf("ml.clicks changed: %d rows in %d snapshots", rows, snaps)
	}
	if ok, _ := cat.Exists(ctx, "ml.fresh"); ok {
		t.Error("ml.fresh was created by a refused import")
	}

	// Files with a column the table lacks; a partitioning the table lacks.
	extra := t.TempDir()
	writeDay(t, extra, arrow.NewSchema(append(clicks.Fields(), arrow.Field{Name: "ctr32", Type: arrow.PrimitiveTypes.Float32}), nil), 0, 0, 10)
	_, err := lakeimport.Import(ctx, cat, lakeimport.Options{Table: "ml.clicks", From: []string{extra}}, nil)
	if !errors.Is(err, lakeimport.ErrBadInput) || !strings.Contains(err.Error(), `column "ctr32" is not in the table`) {
		t.Errorf("extra column: %v", err)
	}
	by, _ := lakeimport.ParsePartitionBy("bucket(8,user_id)")
	_, err = lakeimport.Import(ctx, cat, lakeimport.Options{Table: "ml.clicks", From: []string{good}, PartitionBy: by}, nil)
	if !errors.Is(err, lakeimport.ErrBadInput) || !strings.Contains(err.Error(), "is not table ml.clicks's partitioning") {
		t.Errorf("other partitioning: %v", err)
	}
	by, _ = lakeimport.ParsePartitionBy("day(country)")
	_, err = lakeimport.Import(ctx, cat, lakeimport.Options{Table: "ml.other", From: []string{good}, PartitionBy: by}, nil)
	if !errors.Is(err, lakeimport.ErrBadInput) || !strings.Contains(err.Error(), `cannot partition column "country"`) {
		t.Errorf("day of a string: %v", err)
	}
	for _, from := range [][]string{nil, {filepath.Join(good, "nothing-*.parquet")}, {"s3://bucket/x/"}} {
		if _, err := lakeimport.Import(ctx, cat, lakeimport.Options{Table: "ml.clicks", From: from}, nil); !errors.Is(err, lakeimport.ErrBadInput) {
			t.Errorf("from %v: %v, want bad input", from, err)
		}
	}
	notParquet := filepath.Join(t.TempDir(), "x.parquet")
	os.WriteFile(notParquet, []byte("a,b\n1,2\n"), 0o644)
	if _, err := lakeimport.Import(ctx, cat, lakeimport.Options{Table: "ml.clicks", From: []string{notParquet}}, nil); !errors.Is(err, lakeimport.ErrBadInput) || !strings.Contains(err.Error(), "is not a Parquet file") {
		t.Errorf("not parquet: %v", err)
	}
	if rows, _, snaps := contents(t, cat, "ml.clicks"); rows != 100 || snaps != 1 {
		t.Errorf("ml.clicks changed: %d rows in %d snapshots", rows, snaps)
	}
}

// TestImportReadsHiveFolders: files under date=YYYY-MM-DD/ without a date
// column of their own get it from the folder (a DATE the table can
// partition by); other key=value folders become string columns. Folders
// that disagree or a date folder that is no date are refused, naming it.
func TestImportReadsHiveFolders(t *testing.T) {
	ctx := context.Background()
	cat := openCatalog(t)
	noDate := arrow.NewSchema([]arrow.Field{
		{Name: "user_id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "ctr", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	}, nil)
	dir := t.TempDir()
	perDay := map[string]int64{}
	for d := range 3 {
		// writeDay puts the file under dir/date=2026-11-2X/; one more
		// level of region=eu/ moves it there.
		sub := filepath.Join(dir, "region=eu")
		perDay[fmt.Sprintf("2026-11-%02d", 21+d)] = writeDay(t, sub, noDate, d, d*1000, 100)
	}
	// The region folder sits above the date's: move each file below
	// date=.../region=eu/ instead, the order Spark writes.
	moved := t.TempDir()
	for day := range perDay {
		dst := filepath.Join(moved, "date="+day, "region=eu")
		if err := os.MkdirAll(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "region=eu", "date="+day, "part.parquet"), filepath.Join(dst, "part.parquet")); err != nil {
			t.Fatal(err)
		}
	}
	by, _ := lakeimport.ParsePartitionBy("date")
	res, err := lakeimport.Import(ctx, cat, lakeimport.Options{Table: "ml.hive", From: []string{moved}, PartitionBy: by}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 300 {
		t.Fatalf("result %+v", res)
	}
	tbl, err := cat.Load(ctx, "ml.hive")
	if err != nil {
		t.Fatal(err)
	}
	at, err := lake.Scan(ctx, tbl).ToArrowTable(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer at.Release()
	sch := at.Schema()
	di, ri, ui := sch.FieldIndices("date"), sch.FieldIndices("region"), sch.FieldIndices("user_id")
	if len(di) != 1 || len(ri) != 1 || sch.Field(di[0]).Type.ID() != arrow.DATE32 || sch.Field(ri[0]).Type.ID() != arrow.STRING {
		t.Fatalf("table schema %v: want a DATE date and a string region from the folders", sch)
	}
	got := map[string]int64{}
	tr := array.NewTableReader(at, 1024)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		dates, regions, users := rec.Column(di[0]).(*array.Date32), rec.Column(ri[0]).(*array.String), rec.Column(ui[0]).(*array.Int64)
		for i := range int(rec.NumRows()) {
			if regions.Value(i) != "eu" {
				t.Fatalf("row %d: region %q", i, regions.Value(i))
			}
			got[dates.Value(i).ToTime().Format("2006-01-02")] += users.Value(i)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(perDay) {
		t.Errorf("user sums by day %v, want %v (each file's rows on its folder's date)", got, perDay)
	}
	if spec := tbl.Spec(); spec.NumFields() != 1 {
		t.Errorf("partition spec %s, want the folder's date", spec.String())
	}

	// A date folder that is no date, and files under different keys.
	bad := t.TempDir()
	writeDay(t, bad, noDate, 0, 0, 10)
	if err := os.Rename(filepath.Join(bad, "date=2026-11-21"), filepath.Join(bad, "date=yesterday")); err != nil {
		t.Fatal(err)
	}
	_, err = lakeimport.Import(ctx, cat, lakeimport.Options{Table: "ml.bad", From: []string{bad}}, nil)
	if !errors.Is(err, lakeimport.ErrBadInput) || !strings.Contains(err.Error(), "folder date=yesterday/") {
		t.Errorf("date=yesterday: %v, want bad input naming the folder", err)
	}
	mixed := t.TempDir()
	writeDay(t, mixed, noDate, 0, 0, 10)
	writeDay(t, filepath.Join(mixed, "region=us"), noDate, 1, 0, 10)
	_, err = lakeimport.Import(ctx, cat, lakeimport.Options{Table: "ml.bad", From: []string{mixed}}, nil)
	if !errors.Is(err, lakeimport.ErrBadInput) || !strings.Contains(err.Error(), "every file needs the same key=value folders") {
		t.Errorf("mixed folder keys: %v", err)
	}
	if ok, _ := cat.Exists(ctx, "ml.bad"); ok {
		t.Error("a refused import created ml.bad")
	}
}

// TestImportPrimaryKey: --primary-key makes a new table's identifier
// fields (required); a null key, a key the files lack, or another key
// than an existing table's is refused and nothing is committed.
func TestImportPrimaryKey(t *testing.T) {
	ctx := context.Background()
	cat := openCatalog(t)
	dir := t.TempDir()
	writeDay(t, dir, clicks, 0, 0, 100)
	if _, err := lakeimport.Import(ctx, cat, lakeimport.Options{Table: "ml.keyed", From: []string{dir}, PrimaryKey: []string{"user_id"}}, nil); err != nil {
		t.Fatal(err)
	}
	tbl, err := cat.Load(ctx, "ml.keyed")
	if err != nil {
		t.Fatal(err)
	}
	ids := tbl.Schema().IdentifierFieldIDs
	if len(ids) != 1 {
		t.Fatalf("identifier fields %v, want user_id", ids)
	}
	if f, _ := tbl.Schema().FindFieldByID(ids[0]); f.Name != "user_id" || !f.Required {
		t.Fatalf("identifier field %+v, want required user_id", f)
	}
	if rows, _, _ := contents(t, cat, "ml.keyed"); rows != 100 {
		t.Fatalf("%d rows", rows)
	}
	for _, c := range []struct {
		table string
		key   []string
		want  string
	}{
		{"ml.keyed", []string{"country"}, "is not table ml.keyed's primary key (user_id)"},
		{"ml.fresh", []string{"nope"}, `--primary-key "nope" is not a column`},
	} {
		_, err := lakeimport.Import(ctx, cat, lakeimport.Options{Table: c.table, From: []string{dir}, PrimaryKey: c.key}, nil)
		if !errors.Is(err, lakeimport.ErrBadInput) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s key %v: %v, want %q", c.table, c.key, err, c.want)
		}
	}
	// country holds no nulls in writeDay's rows, ctr does not either: a
	// key over a column with a null needs a file of its own.
	nulls := t.TempDir()
	b := array.NewRecordBuilder(memory.DefaultAllocator, clicks)
	defer b.Release()
	b.Field(0).(*array.Int64Builder).AppendValues([]int64{1, 2}, nil)
	b.Field(1).(*array.Date32Builder).AppendValues([]arrow.Date32{day0, day0}, nil)
	b.Field(2).(*array.Float64Builder).AppendValues([]float64{0.1, 0.2}, nil)
	b.Field(3).(*array.StringBuilder).AppendValues([]string{"de", ""}, []bool{true, false})
	rec := b.NewRecordBatch()
	defer rec.Release()
	f, err := os.Create(filepath.Join(nulls, "part.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	at := array.NewTableFromRecords(clicks, []arrow.RecordBatch{rec})
	defer at.Release()
	if err := pqarrow.WriteTable(at, f, 1000, nil, pqarrow.DefaultWriterProps()); err != nil {
		t.Fatal(err)
	}
	_, err = lakeimport.Import(ctx, cat, lakeimport.Options{Table: "ml.nullkey", From: []string{nulls}, PrimaryKey: []string{"country"}}, nil)
	if !errors.Is(err, lakeimport.ErrBadInput) || !strings.Contains(err.Error(), `column "country" is required (a primary key's are) and holds 1 null(s)`) {
		t.Errorf("null key: %v", err)
	}
	if ok, _ := cat.Exists(ctx, "ml.nullkey"); ok {
		t.Error("a refused import left ml.nullkey behind")
	}
}
