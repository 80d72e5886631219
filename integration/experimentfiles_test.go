package integration

import (
	"testing"
	"time"

	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/storage"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/worker"
)

// TestFeatureExperimentFiles runs dags/examples/feature-experiment-files.yaml
// on the small demo data written as Parquet files in date= folders
// (`retrain data demo --files`), with no lake: the candidate's split joins
// the user_signals folder point-in-time and its AUC lifts over the
// control's, so the gate passes; joined with the noise_daily folder it does
// not, and the gate rejects it. Both splits read the same click rows.
func TestFeatureExperimentFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := demodata.WriteFiles(dir, retrainData); err != nil {
		t.Fatal(err)
	}
	srv := s3test.Start(t)
	queue := newQueue(t)
	startWorkerWith(t, worker.Config{TaskQueue: queue, Store: storage.Config{S3: srv.Config("")},
		Env: progenv.Policy{AllowPaths: []string{dir}}})
	for _, c := range []struct {
		features  string
		columns   []any
		alignment string
		wantPass  bool
	}{
		{"user_signals", []any{"log_activity", "logit_ctr_7d", "recency"}, "previous_day", true},
		{"noise_daily", []any{"noise_a", "noise_b"}, "as_of", false},
	} {
		t.Run(c.features, func(t *testing.T) {
			res := runRequest(t, runs.Request{Pipeline: "feature-experiment-files", TaskQueue: queue, Params: map[string]any{
				"data_dir": dir, "features": c.features, "columns": c.columns, "alignment": c.alignment,
				"start_date": retrainStart, "end_date": retrainEnd,
			}}, 4*time.Minute)
			wantStatus(t, res, runs.StatusSucceeded)
			cand := node(t, res, "evaluate_candidate").Outputs["auc"].(float64)
			ctrl := node(t, res, "evaluate_control").Outputs["auc"].(float64)
			gate := node(t, res, "gate")
			split := node(t, res, "split_candidate")
			t.Logf("%s (%s): candidate AUC %.4f, control AUC %.4f, lift %+.4f; gate: %v; split: %v", c.features, c.alignment, cand, ctrl, cand-ctrl,
				gate.Outputs["summary"], split.Outputs["summary"])
			if gate.Outputs["passed"] != c.wantPass {
				t.Fatalf("gate passed = %v, want %v: %v", gate.Outputs["passed"], c.wantPass, gate.Outputs["reason"])
			}
			if c.wantPass && cand <= ctrl {
				t.Errorf("the gate passed without an AUC lift: %.4f vs %.4f", cand, ctrl)
			}
			ctl := node(t, res, "split_control")
			for _, k := range []string{"train_rows", "eval_rows"} {
				if ctl.Outputs[k] != split.Outputs[k] {
					t.Errorf("%s: control %v, candidate %v: the splits must hold the same rows", k, ctl.Outputs[k], split.Outputs[k])
				}
			}
			if j, _ := split.Outputs["joined"].([]any); len(j) != len(c.columns) {
				t.Errorf("joined columns %v, want %d", split.Outputs["joined"], len(c.columns))
			}
		})
	}
}
