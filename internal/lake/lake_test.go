package lake_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/lake"
)

func openLake(t *testing.T, cfg lake.Config) *lake.Catalog {
	t.Helper()
	cat, err := lake.Open(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	return cat
}

func testSchema() *iceberg.Schema {
	return iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "user_id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 3, Name: "date", Type: iceberg.PrimitiveTypes.Date, Required: true},
		iceberg.NestedField{ID: 4, Name: "v", Type: iceberg.PrimitiveTypes.Float64},
	)
}

func bucketed() lake.TableSpec {
	spec := iceberg.NewPartitionSpec(
		iceberg.PartitionField{SourceIDs: []int{3}, FieldID: 1000, Name: "date", Transform: iceberg.IdentityTransform{}},
		iceberg.PartitionField{SourceIDs: []int{2}, FieldID: 1001, Name: "user_bucket", Transform: iceberg.BucketTransform{NumBuckets: 4}},
	)
	return lake.TableSpec{Partition: &spec}
}

type row struct {
	id, user int64
	day      int32
	v        float64
}

func rows(n int, base int64) []row {
	out := make([]row, n)
	for i := range out {
		id := base + int64(i)
		out[i] = row{id: id, user: id % 13, day: 20400 + int32(id%3), v: float64(id) / 7}
	}
	return out
}

func record(t testing.TB, tbl *table.Table, rs []row) (*arrow.Schema, arrow.RecordBatch) {
	t.Helper()
	schema, err := table.SchemaToArrowSchema(tbl.Schema(), nil, true, false)
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for _, r := range rs {
		b.Field(0).(*array.Int64Builder).Append(r.id)
		b.Field(1).(*array.Int64Builder).Append(r.user)
		b.Field(2).(*array.Date32Builder).Append(arrow.Date32(r.day))
		b.Field(3).(*array.Float64Builder).Append(r.v)
	}
	return schema, b.NewRecordBatch()
}

// write writes rows as data files of a table and commits them.
func write(t *testing.T, cat *lake.Catalog, name string, rs ...[]row) *table.Table {
	t.Helper()
	ctx := context.Background()
	tbl, err := cat.Load(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	var files []iceberg.DataFile
	for _, batch := range rs {
		schema, rec := record(t, tbl, batch)
		fs, err := lake.WriteFiles(ctx, tbl, schema, func(yield func(arrow.RecordBatch, error) bool) { yield(rec, nil) })
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, fs...)
	}
	tbl, err = cat.AddFiles(ctx, name, files, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

func checksum(t *testing.T, cat *lake.Catalog, name string) lake.Checksum {
	t.Helper()
	tbl, err := cat.Load(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := lake.TableChecksum(context.Background(), tbl)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

func TestConfigResolve(t *testing.T) {
	r, err := lake.Config{DataDir: "/data"}.Resolved()
	if err != nil {
		t.Fatal(err)
	}
	if r.Type != "sql" || !strings.HasPrefix(r.URI, "file:/data/catalog.db?") || r.Warehouse != "file:///data/warehouse" {
		t.Errorf("dev config resolved to %+v", r)
	}
	p := lake.Config{Type: "rest", URI: "http://cat", Warehouse: "s3://b/w", S3: lake.S3Config{Endpoint: "http://s3", Region: "eu"}}
	if r, err := p.Resolved(); err != nil || r.Properties()["s3.endpoint"] != "http://s3" || r.Properties()["uri"] != "http://cat" {
		t.Errorf("rest config %+v %v", r.Properties(), err)
	}
	for _, bad := range []lake.Config{{}, {Type: "rest"}, {Type: "hive", URI: "x"}} {
		if _, err := bad.Resolved(); err == nil {
			t.Errorf("config %+v accepted", bad)
		}
	}
}

// TestChecksumIsOrderIndependent writes the same rows in different orders
// and file splits: same checksum. A changed or duplicated row changes it.
func TestChecksumIsOrderIndependent(t *testing.T) {
	ctx := context.Background()
	cat := openLake(t, lake.Config{DataDir: t.TempDir()})
	rs := rows(300, 0)
	rev := make([]row, len(rs))
	for i, r := range rs {
		rev[len(rs)-1-i] = r
	}
	changed := append([]row(nil), rs...)
	changed[17].v++
	dup := append(append([]row(nil), rs...), rs[5])
	for _, name := range []string{"t.a", "t.b", "t.c", "t.d"} {
		if _, err := cat.CreateTable(ctx, name, testSchema(), bucketed()); err != nil {
			t.Fatal(err)
		}
	}
	write(t, cat, "t.a", rs)
	write(t, cat, "t.b", rev[:100], rev[100:])
	write(t, cat, "t.c", changed)
	write(t, cat, "t.d", dup)
	a, b, c, d := checksum(t, cat, "t.a"), checksum(t, cat, "t.b"), checksum(t, cat, "t.c"), checksum(t, cat, "t.d")
	if a.Digest != b.Digest || a.Rows != 300 {
		t.Errorf("same rows, different checksums: %+v %+v", a, b)
	}
	if c.Digest == a.Digest || d.Digest == a.Digest || d.Rows != 301 {
		t.Errorf("a changed or duplicated row kept the checksum: %v %v %v", a.Digest, c.Digest, d.Digest)
	}
}

// TestUpdateRedoesOnConflict: another process commits between our load and
// our commit. The commit fails, is redone on the fresh table, and both
// changes land exactly once.
func TestUpdateRedoesOnConflict(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	us := openLake(t, lake.Config{DataDir: dir})
	them := openLake(t, lake.Config{DataDir: dir}) // another process: its own locks
	if _, err := us.CreateTable(ctx, "t.x", testSchema(), bucketed()); err != nil {
		t.Fatal(err)
	}
	write(t, us, "t.x", rows(10, 0))
	calls := 0
	_, err := us.Update(ctx, "t.x", func(ctx context.Context, tbl *table.Table, tx *table.Transaction) error {
		calls++
		if calls == 1 {
			write(t, them, "t.x", rows(5, 1000)) // lands first
		}
		schema, rec := record(t, tbl, rows(7, 2000))
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
		t.Errorf("build ran %d times, want 2 (once more after the conflict)", calls)
	}
	if sum := checksum(t, us, "t.x"); sum.Rows != 22 {
		t.Errorf("%d rows, want 10+5+7", sum.Rows)
	}
	if !lake.IsConflict(errors.New(`requirement failed: branch "main" has changed: expected id 1, found 2`)) || lake.IsConflict(errors.New("disk full")) {
		t.Error("IsConflict misclassifies")
	}
}

// TestAddFilesToBucketPartitions adds existing Parquet files to a table
// partitioned by a bucket transform, which iceberg-go's AddFiles cannot
// (it infers partitions from column bounds).
func TestAddFilesToBucketPartitions(t *testing.T) {
	ctx := context.Background()
	cat := openLake(t, lake.Config{DataDir: t.TempDir()})
	tbl, err := cat.CreateTable(ctx, "t.files", testSchema(), bucketed())
	if err != nil {
		t.Fatal(err)
	}
	schema, rec := record(t, tbl, rows(200, 0))
	written, err := lake.WriteFiles(ctx, tbl, schema, func(yield func(arrow.RecordBatch, error) bool) { yield(rec, nil) })
	if err != nil {
		t.Fatal(err)
	}
	var files []iceberg.DataFile
	for _, df := range written {
		part := df.Partition()
		df2, err := lake.DataFileWithPartition(ctx, tbl, df.FilePath(), map[string]any{"date": part[1000], "user_bucket": part[1001]})
		if err != nil {
			t.Fatal(err)
		}
		if df2.Count() != df.Count() {
			t.Errorf("%s: %d rows, want %d", df.FilePath(), df2.Count(), df.Count())
		}
		files = append(files, df2)
	}
	tbl, err = cat.AddFiles(ctx, "t.files", files, nil)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := lake.PlanPartitions(ctx, tbl, tbl.Scan(table.WithRowFilter(iceberg.EqualTo(iceberg.Reference("user_id"), int64(5)))))
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) == 0 || len(parts) > 3 {
		t.Errorf("a user_id filter planned %d partitions, want its bucket on each of 3 days", len(parts))
	}
	if sum := checksum(t, cat, "t.files"); sum.Rows != 200 {
		t.Errorf("%d rows", sum.Rows)
	}
}

// TestS3Warehouse runs the table operations against a real S3 server
// (versitygw): write, overwrite partitions, roll back.
func TestS3Warehouse(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an S3 server")
	}
	srv := s3test.Start(t)
	ctx := context.Background()
	dir := t.TempDir()
	cat := openLake(t, lake.Config{
		URI: "file:" + dir + "/catalog.db", Warehouse: srv.URI("warehouse"),
		S3: lake.S3Config{Endpoint: srv.Endpoint, Region: srv.Region, AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey},
	})
	if _, err := cat.CreateTable(ctx, "t.s3", testSchema(), bucketed()); err != nil {
		t.Fatal(err)
	}
	first := write(t, cat, "t.s3", rows(100, 0))
	before := checksum(t, cat, "t.s3")

	// Dynamic partition overwrite: new values for the partitions of 40 rows.
	tbl, err := cat.Update(ctx, "t.s3", func(ctx context.Context, tbl *table.Table, tx *table.Transaction) error {
		changed := rows(100, 0)
		for i := range changed {
			changed[i].v = -1
		}
		schema, rec := record(t, tbl, changed)
		files, err := lake.WriteFiles(ctx, tbl, schema, func(yield func(arrow.RecordBatch, error) bool) { yield(rec, nil) })
		if err != nil {
			return err
		}
		return lake.OverwritePartitions(ctx, tbl, tx, files, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	if after := checksum(t, cat, "t.s3"); after.Rows != 100 || after.Digest == before.Digest {
		t.Errorf("overwrite: %+v", after)
	}
	keys := len(srv.Keys(t))
	res, err := cat.Rollback(ctx, "t.s3", first.CurrentSnapshot().SnapshotID)
	if err != nil || !res.Ancestor {
		t.Fatalf("rollback %+v %v", res, err)
	}
	if got := checksum(t, cat, "t.s3"); got.Digest != before.Digest {
		t.Errorf("after rollback %+v, want %+v", got, before)
	}
	var parquet int
	for _, k := range srv.Keys(t) {
		if strings.HasSuffix(k, ".parquet") {
			parquet++
		}
	}
	if n := len(srv.Keys(t)); n != keys+1 { // one new metadata.json
		t.Errorf("rollback wrote %d objects, want 1 (metadata)", n-keys)
	}
	if len(lake.Snapshots(tbl)) != 2 || parquet == 0 {
		t.Errorf("snapshots %d, parquet objects %d", len(lake.Snapshots(tbl)), parquet)
	}
}
