package lake

import (
	"context"
	"testing"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/nodetype"
)

// TestMaintainNode runs maintain_table as the worker does: bad input is
// permanent, a worker without a model store refuses to expire unless
// told to keep no model's snapshots, and a run reports what it did.
func TestMaintainNode(t *testing.T) {
	ctx := context.Background()
	lz := lake.NewLazy(lake.Config{DataDir: t.TempDir()}, quiet)
	t.Cleanup(func() { lz.Close() })
	cat, err := lz.Catalog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := demodata.Write(ctx, cat, demodata.Config{Rows: 300, Days: 2, Seed: 3, Users: 50, Ads: 10}, demodata.DefaultTables, false, nil); err != nil {
		t.Fatal(err)
	}
	l := &Lake{Catalog: lz, Logger: quiet}
	run := func(with map[string]any) (map[string]any, error) {
		return nodetest.Run(t, l.maintainType().Run, nodetype.Input{Pipeline: "p", RunID: "r", Node: "upkeep", Type: "maintain_table", With: with}, nil)
	}
	for _, with := range []map[string]any{
		{"table": "ml.nope", "compact": true},
		{"table": "ml.training", "keep_last": -1},
		{"table": "ml.training", "orphan_margin": "0", "remove_orphans": true},
		{"table": "ml.training"}, // expiry, models: true, and no store
	} {
		if _, err := run(with); nodetest.ErrType(err) != errtype.BadInput {
			t.Errorf("%v: %v, want %s", with, err, errtype.BadInput)
		}
	}
	out, err := run(map[string]any{"table": "ml.training", "expire_older_than": "0", "keep_last": 0, "models": false,
		"compact": true, "remove_orphans": true})
	if err != nil {
		t.Fatal(err)
	}
	if out["snapshots_before"] != float64(1) || out["snapshots_after"] != float64(1) || out["dry_run"] != false ||
		out["files_after"] != out["files_before"] || out["summary"] == "" {
		t.Errorf("outputs %v", out)
	}
}
