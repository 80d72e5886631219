package worker

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/nodetype"
	"github.com/retrain-ml/retrain/runs"
)

// TestReuseVerifier: outputs that point at objects, folders, snapshots
// and types with a check of their own; what is gone is said per node.
func TestReuseVerifier(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	store := srv.Open(t, "")
	if _, err := store.PutBytes(ctx, "runs/r1/split/manifest.json", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if _, err := store.PutBytes(ctx, "runs/r1/model/model.bin", []byte("m")); err != nil {
		t.Fatal(err)
	}
	lz := lake.NewLazy(lake.Config{DataDir: t.TempDir()}, slog.Default())
	t.Cleanup(func() { lz.Close() })
	cat, err := lz.Catalog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	schema := iceberg.NewSchema(0, iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true})
	if _, err := cat.CreateTable(ctx, "ml.t", schema, lake.TableSpec{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.CreateTable(ctx, "ml.s", schema, lake.TableSpec{}); err != nil {
		t.Fatal(err)
	}
	// Two commits to ml.s: a staging table that moved on since its first.
	var snaps []string
	for i := range 2 {
		tbl, err := cat.Load(ctx, "ml.s")
		if err != nil {
			t.Fatal(err)
		}
		as, err := table.SchemaToArrowSchema(tbl.Schema(), nil, true, false)
		if err != nil {
			t.Fatal(err)
		}
		b := array.NewRecordBuilder(memory.DefaultAllocator, as)
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		rec := b.NewRecordBatch()
		b.Release()
		files, err := lake.WriteFiles(ctx, tbl, as, func(yield func(arrow.RecordBatch, error) bool) { yield(rec, nil) })
		if err != nil {
			t.Fatal(err)
		}
		if tbl, err = cat.AddFiles(ctx, "ml.s", files, nil); err != nil {
			t.Fatal(err)
		}
		snaps = append(snaps, strconv.FormatInt(tbl.Metadata().CurrentSnapshot().SnapshotID, 10))
	}
	uri := func(key string) string { return store.URI().Join(key).String() }
	v := &reuseVerifier{store: store, lake: lz, logger: slog.Default(), types: map[string]nodetype.Type{
		"own": {Verify: func(context.Context, map[string]any, map[string]any) error { return errTestGone }},
	}}
	verdict, err := v.Verify(ctx, []runs.ReuseCheck{
		{Node: "split", Type: "split", Outputs: map[string]any{"uri": uri("runs/r1/split/manifest.json"), "manifest": "runs/r1/split/manifest.json"}},
		{Node: "train", Type: "train", Outputs: map[string]any{"model_uri": uri("runs/r1/model/"), "checkpoint": uri("runs/r1/ckpt/9/")}},
		{Node: "split2", Type: "split", Outputs: map[string]any{"uri": uri("runs/r2/split/manifest.json")}},
		{Node: "promote", Type: "promote_features", With: map[string]any{"training_table": "ml.t"}, Outputs: map[string]any{"snapshot_id": "4242"}},
		{Node: "stage", Type: "stage_features", Outputs: map[string]any{"staging_table": "ml.nope", "snapshot_id": "7"}},
		{Node: "staged", Type: "stage_features", Outputs: map[string]any{"staging_table": "ml.s", "snapshot_id": snaps[0]}},
		{Node: "staged2", Type: "stage_features", Outputs: map[string]any{"staging_table": "ml.s", "snapshot_id": snaps[1]}},
		{Node: "promoted", Type: "promote_features", With: map[string]any{"training_table": "ml.s"}, Outputs: map[string]any{"snapshot_id": snaps[0]}},
		{Node: "gate", Type: "gate", Outputs: map[string]any{"passed": true}},
		{Node: "mine", Type: "own", Outputs: map[string]any{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"split2":  "output uri: " + uri("runs/r2/split/manifest.json") + " is gone",
		"promote": "snapshot 4242 of ml.t is gone (expired by table maintenance?)",
		"stage":   "snapshot 7 of ml.nope:",
		"staged":  "ml.s has changed since: its current snapshot is " + snaps[1] + ", not " + snaps[0],
		"mine":    "gone for a test",
	}
	for node, w := range want {
		if got := verdict.Gone[node]; !strings.HasPrefix(got, w) {
			t.Errorf("%s: %q, want %q...", node, got, w)
		}
	}
	// A staging table still at the node's snapshot, and an older
	// snapshot read by its id, may be reused.
	for _, ok := range []string{"split", "train", "gate", "staged2", "promoted"} {
		if why, gone := verdict.Gone[ok]; gone {
			t.Errorf("%s found gone: %s", ok, why)
		}
	}
}

type testGone struct{}

func (testGone) Error() string { return "gone for a test" }

var errTestGone error = testGone{}
