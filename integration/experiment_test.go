package integration

import (
	"context"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/runs"
)

// TestFeatureExperiment runs dags/examples/feature-experiment.yaml on the
// small demo data: a feature group the labels depend on
// (features.user_signals, the label model's user terms, which ml.training
// lacks) lifts the AUC over the control and the gate passes; a group of pure noise
// (features.noise_daily) does not and the gate rejects it. Neither run
// promotes (params.promote defaults to false), so ml.training's snapshot is
// the one both started on.
func TestFeatureExperiment(t *testing.T) {
	parallelFor(t, 35*time.Second)
	e := newRetrainEnv(t, true)
	before := e.trainingSnapshot(t)

	cases := []struct {
		table    string
		wantPass bool
	}{
		{"features.user_signals", true},
		{"features.noise_daily", false},
	}
	for _, c := range cases {
		t.Run(c.table, func(t *testing.T) {
			res := runRequest(t, runs.Request{Pipeline: "feature-experiment", TaskQueue: e.queue, Params: map[string]any{
				"feature_table": c.table, "start_date": retrainStart, "end_date": retrainEnd,
			}}, 4*time.Minute)
			wantStatus(t, res, runs.StatusSucceeded)
			cand := node(t, res, "evaluate_candidate").Outputs["auc"].(float64)
			ctrl := node(t, res, "evaluate_control").Outputs["auc"].(float64)
			gate := node(t, res, "gate")
			t.Logf("%s: candidate AUC %.4f, control AUC %.4f, lift %+.4f; gate: %v", c.table, cand, ctrl, cand-ctrl, gate.Outputs["summary"])
			if gate.Outputs["passed"] != c.wantPass {
				t.Fatalf("gate passed = %v, want %v: %v", gate.Outputs["passed"], c.wantPass, gate.Outputs["reason"])
			}
			if gate.Outputs["baseline_version"] != "control" {
				t.Errorf("gate baseline %v, want the control", gate.Outputs["baseline_version"])
			}
			if c.wantPass && cand <= ctrl {
				t.Errorf("the gate passed without an AUC lift: %.4f vs %.4f", cand, ctrl)
			}
			if p := node(t, res, "promote"); p.Status != runs.NodeSkipped {
				t.Errorf("promote %s, want skipped (promote defaults to false)", p.Status)
			}
			if n := node(t, res, "evaluate_control"); n.Outputs["rows"] != node(t, res, "evaluate_candidate").Outputs["rows"] {
				t.Errorf("control and candidate scored on different row counts: %v", n.Outputs)
			}
			if got := e.trainingSnapshot(t); got != before {
				t.Fatalf("ml.training snapshot %d, want %d unchanged", got, before)
			}
		})
	}
}

// trainingSnapshot is ml.training's current snapshot id.
func (e *retrainEnv) trainingSnapshot(t *testing.T) int64 {
	t.Helper()
	tbl, err := e.cat.Load(context.Background(), "ml.training")
	if err != nil {
		t.Fatal(err)
	}
	return tbl.CurrentSnapshot().SnapshotID
}
