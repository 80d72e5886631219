package train

import (
	"context"
	"io"
	"log/slog"
	"math"
	"strconv"
	"testing"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/devkit/torchtest"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/nodetype"
)

// TestTorchTrainsOnJoinedSplit: examples/torch/train.py, written for
// splits of a promoted training table, trains as 2 ranks on the split of
// a feature experiment, which joined a staging table at split time, with
// no change: the same steps and the same loss as on the split of the
// table the staging table was then promoted into.
func TestTorchTrainsOnJoinedSplit(t *testing.T) {
	py := torchtest.Python(t)
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	lz := lake.NewLazy(lake.Config{DataDir: t.TempDir()}, quiet)
	t.Cleanup(func() { lz.Close() })
	cat, err := lz.Catalog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := demodata.Write(ctx, cat, demodata.Config{Rows: 3000, Days: 3, Seed: 3, Users: 200, Ads: 30}, demodata.DefaultTables, false, quiet); err != nil {
		t.Fatal(err)
	}
	start, end := demodata.DefaultStart.String(), (demodata.DefaultStart + 2).String()
	tbl, err := cat.Load(ctx, "ml.training")
	if err != nil {
		t.Fatal(err)
	}
	base := tbl.CurrentSnapshot().SnapshotID
	st, err := features.Stage(ctx, cat, features.StageSpec{Training: "ml.training", Feature: "features.user_daily", Keys: []string{"user_id"},
		StartDate: start, EndDate: end, Alignment: string(backfill.PreviousDay), Features: []string{"activity", "sessions", "recent_ads"}, Prefix: "u_"}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	store := s3test.Start(t).Open(t, "")
	splits := &split.Splits{Catalog: lz, Store: store, Logger: quiet}
	splitOf := func(run string, snap int64, join []any) string {
		w := map[string]any{"table": "ml.training", "snapshot_id": strconv.FormatInt(snap, 10), "start_date": start, "end_date": end,
			"dense": []any{"u_activity", "u_sessions"}, "sparse": []any{"user_id", "ad_id", "u_recent_ads"}}
		if join != nil {
			w["join"] = join
		}
		out, err := nodetest.Run(t, splits.Run, nodetype.Input{Pipeline: "test", RunID: run, Node: "split", Type: "split", With: w}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return out["uri"].(string)
	}
	joined := splitOf("joined", base, []any{map[string]any{"table": st.Staging, "snapshot_id": strconv.FormatInt(st.SnapshotID, 10)}})
	pr, err := features.Promote(ctx, cat, features.PromoteSpec{Training: "ml.training", Staging: []string{st.Staging}, StartDate: start, EndDate: end}, "p", 2, quiet)
	if err != nil {
		t.Fatal(err)
	}
	promoted := splitOf("promoted", pr.Snapshot, nil)

	tr := &Trainers{Store: store, Logger: quiet, Env: progenv.Policy{PassEnv: []string{"PYTHONDONTWRITEBYTECODE"}}}
	train := func(run, data string) map[string]any {
		out, err := nodetest.Run(t, tr.Run, nodetype.Input{Pipeline: "test", RunID: run, Node: "train", Type: "train", With: map[string]any{
			"trainer": "command", "data": data, "data_format": "npy", "processes": 2,
			"argv": []any{py, example(t, "train.py"), "--epochs", "2", "--batch-size", "250", "--buckets", "4096", "--dim", "4", "--seed", "7"},
		}}, nil)
		if err != nil {
			t.Fatalf("train.py on the %s split: %v", run, err)
		}
		return out
	}
	j, p := train("joined", joined), train("promoted", promoted)
	t.Logf("joined split: %v steps, loss %v; promoted: %v steps, loss %v", j["steps"], j["loss"], p["steps"], p["loss"])
	jl, ok1 := j["loss"].(float64)
	pl, ok2 := p["loss"].(float64)
	if !ok1 || !ok2 || j["steps"] != p["steps"] || j["steps"] == 0.0 || math.Abs(jl-pl) > 1e-6 {
		t.Errorf("joined split: steps %v loss %v; promoted split: steps %v loss %v; want the same training", j["steps"], j["loss"], p["steps"], p["loss"])
	}
}
