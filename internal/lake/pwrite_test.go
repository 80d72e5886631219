package lake_test

import (
	"context"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/lake"
)

// partitionsOf groups rows by partition (date, bucket of user_id) the way
// a partition-by-partition read would hand them over.
func partitionsOf(t *testing.T, rs []row) ([]map[string]int64, [][]row) {
	t.Helper()
	bucket := iceberg.BucketTransform{NumBuckets: 4}.Transformer(iceberg.PrimitiveTypes.Int64)
	index := map[[2]int64]int{}
	var values []map[string]int64
	var groups [][]row
	for _, r := range rs {
		b := bucket(r.user)
		if !b.Valid {
			t.Fatalf("no bucket for user %d", r.user)
		}
		k := [2]int64{int64(r.day), int64(b.Val)}
		i, ok := index[k]
		if !ok {
			i = len(groups)
			index[k] = i
			values = append(values, map[string]int64{"date": k[0], "user_id": k[1]})
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], r)
	}
	return values, groups
}

// TestWritePartitionsMatchesWriteFiles writes the same rows with
// WritePartitions (labelled batches, two batches for some partitions) and
// with iceberg-go's writer (WriteFiles): the tables have the same
// checksum, every file is in the partition its rows belong to (a scan
// filtered on a partition finds exactly its rows), and the files carry
// column statistics.
func TestWritePartitionsMatchesWriteFiles(t *testing.T) {
	ctx := context.Background()
	cat := openLake(t, lake.Config{DataDir: t.TempDir()})
	for _, name := range []string{"t.iceberg", "t.ours"} {
		if _, err := cat.CreateTable(ctx, name, testSchema(), bucketed()); err != nil {
			t.Fatal(err)
		}
	}
	rs := rows(500, 0)
	write(t, cat, "t.iceberg", rs)

	tbl, err := cat.Load(ctx, "t.ours")
	if err != nil {
		t.Fatal(err)
	}
	values, groups := partitionsOf(t, rs)
	schema, _ := record(t, tbl, nil)
	batches := func(yield func(lake.PartitionBatch, error) bool) {
		for i, g := range groups {
			// Two batches for a partition: both go to its one file.
			half := len(g) / 2
			for _, part := range [][]row{g[:half], g[half:]} {
				_, rec := record(t, tbl, part)
				if !yield(lake.PartitionBatch{Values: values[i], Record: rec}, nil) {
					return
				}
			}
		}
	}
	files, err := lake.WritePartitions(ctx, tbl, schema, batches)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(groups) {
		t.Errorf("%d files for %d partitions, want one each", len(files), len(groups))
	}
	for _, f := range files {
		if f.Count() == 0 || len(f.LowerBoundValues()) == 0 || len(f.NullValueCounts()) == 0 {
			t.Errorf("file %s: %d rows, bounds %v, null counts %v", f.FilePath(), f.Count(), f.LowerBoundValues(), f.NullValueCounts())
		}
		if !strings.Contains(f.FilePath(), "/data/date=") || !strings.Contains(f.FilePath(), "/user_bucket=") {
			t.Errorf("file %s is not in its partition's folder", f.FilePath())
		}
	}
	if _, err := cat.AddFiles(ctx, "t.ours", files, nil); err != nil {
		t.Fatal(err)
	}
	if a, b := checksum(t, cat, "t.iceberg"), checksum(t, cat, "t.ours"); a.Digest != b.Digest || a.Rows != b.Rows || a.Rows != 500 {
		t.Errorf("checksums differ: iceberg-go's writer %+v, WritePartitions %+v", a, b)
	}
	// Partition pruning sees the right tuples: one partition's scan
	// returns exactly that partition's rows.
	tbl, _ = cat.Load(ctx, "t.ours")
	parts, err := lake.PlanPartitions(ctx, tbl, tbl.Scan())
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range groups {
		found := false
		for _, p := range parts {
			if p.Values["date"] == values[i]["date"] && p.Values["user_id"] == values[i]["user_id"] {
				found = true
				if p.Rows != int64(len(g)) {
					t.Errorf("partition %s has %d rows, want %d", p.Key, p.Rows, len(g))
				}
			}
		}
		if !found {
			t.Errorf("partition %v missing", values[i])
		}
	}
}

// TestWritePartitionsRefusesBadInput: a partition that comes back after
// another, a batch without a partition value, and a schema without field
// ids are errors, and nothing is returned to commit.
func TestWritePartitionsRefusesBadInput(t *testing.T) {
	ctx := context.Background()
	cat := openLake(t, lake.Config{DataDir: t.TempDir()})
	tbl, err := cat.CreateTable(ctx, "t.bad", testSchema(), bucketed())
	if err != nil {
		t.Fatal(err)
	}
	values, groups := partitionsOf(t, rows(60, 0))
	schema, _ := record(t, tbl, nil)
	seq := func(order []int, vals func(int) map[string]int64) func(func(lake.PartitionBatch, error) bool) {
		return func(yield func(lake.PartitionBatch, error) bool) {
			for _, i := range order {
				_, rec := record(t, tbl, groups[i])
				if !yield(lake.PartitionBatch{Values: vals(i), Record: rec}, nil) {
					return
				}
			}
		}
	}
	same := func(i int) map[string]int64 { return values[i] }
	cases := map[string]struct {
		schema  *arrow.Schema
		batches func(func(lake.PartitionBatch, error) bool)
		want    string
	}{
		"partition comes back": {schema, seq([]int{0, 1, 0}, same), "comes back"},
		"no partition value":   {schema, seq([]int{0}, func(int) map[string]int64 { return map[string]int64{"date": 1} }), "no value for partition column user_id"},
	}
	plain, err := table.SchemaToArrowSchema(tbl.Schema(), nil, false, false)
	if err != nil {
		t.Fatal(err)
	}
	cases["no field ids"] = struct {
		schema  *arrow.Schema
		batches func(func(lake.PartitionBatch, error) bool)
		want    string
	}{plain, seq(nil, same), "field id"}
	for name, c := range cases {
		files, err := lake.WritePartitions(ctx, tbl, c.schema, c.batches)
		if err == nil || !strings.Contains(err.Error(), c.want) || files != nil {
			t.Errorf("%s: files %v, error %v, want one containing %q", name, files, err, c.want)
		}
	}
}
