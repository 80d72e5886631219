package gate

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/retrain-ml/retrain/activities/evaluate"
	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/activities/internal/objects"
	"github.com/retrain-ml/retrain/activities/split/splittest"
	"github.com/retrain-ml/retrain/activities/train"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/nodetype"
)

var quiet = nodetest.Quiet

// TestBuiltinTrainEvaluateAndResume runs the builtin trainer, retries it
// (it resumes from its last checkpoint), evaluates the candidate with no
// production model and against one, and gates on that evaluation.
func TestBuiltinTrainEvaluateAndResume(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	split := splittest.Write(t, st, "r1", 6000, 2000)
	tr := &train.Trainers{Store: st, Logger: quiet}
	with := map[string]any{"data": split, "epochs": 3, "batch_size": 256, "checkpoint_every": 10, "dim": 4, "buckets": 1024}
	in := nodetype.Input{Pipeline: "test", RunID: "r1", Node: "train", Type: "train", With: with}
	out, err := nodetest.Run(t, tr.Run, in, nil)
	if err != nil {
		t.Fatal(err)
	}
	steps := out["steps"].(float64)
	if out["resumed_from"].(float64) != 0 || steps != 71 || out["train_rows"].(float64) != 6000 {
		t.Fatalf("outputs %v", out)
	}
	var curve []train.CurvePoint
	key, _ := objects.StoreKey(st, out["loss_curve_uri"].(string))
	if err := objects.GetJSON(context.Background(), st, key, &curve); err != nil || len(curve) != int(steps) {
		t.Fatalf("curve: %d points, %v", len(curve), err)
	}

	// A retry of the finished node resumes from its last checkpoint: no
	// step is trained again and the model is the same.
	again, err := nodetest.Run(t, tr.Run, in, train.TrainProgress{Step: 71})
	if err != nil {
		t.Fatal(err)
	}
	if again["resumed_from"].(float64) != steps || again["steps"].(float64) != steps || again["model_uri"] != out["model_uri"] {
		t.Fatalf("retry: %v", again)
	}
	if err := objects.GetJSON(context.Background(), st, key, &curve); err != nil || len(curve) != int(steps) {
		t.Fatalf("curve after the retry: %d points, %v", len(curve), err)
	}

	// Evaluate with no production model, then against one.
	ev := evaluate.Type(st, quiet)
	evIn := nodetype.Input{Pipeline: "test", RunID: "r1", Node: "evaluate", Type: "evaluate",
		With: map[string]any{"candidate": out["model_uri"], "data": split, "model": "ctr", "slices": true}}
	res, err := nodetest.Run(t, ev.Run, evIn, nil)
	if err != nil {
		t.Fatal(err)
	}
	auc, _ := res["auc"].(float64)
	if res["has_baseline"] != false || auc < 0.75 || res["rows"].(float64) != 2000 {
		t.Fatalf("evaluate: %v", res)
	}
	// Every declared output is there, null where there is no baseline.
	for _, k := range ev.NodeType.Outputs {
		if _, ok := res[k]; !ok {
			t.Errorf("evaluate: no output %s", k)
		}
	}
	if first := res["evaluation"].(map[string]any); res["baseline"] != nil || res["baseline_version"] != "" ||
		first["baseline"] != nil || first["baseline_data"] != nil || first["candidate_data"].(map[string]any)["dataset"] != "eval" {
		t.Errorf("evaluate without a baseline: %v", res)
	}
	dir := t.TempDir()
	modelKey, _ := objects.StoreKey(st, out["model_uri"].(string))
	if err := objects.DownloadFile(context.Background(), st, modelKey+train.ModelFile, filepath.Join(dir, train.ModelFile)); err != nil {
		t.Fatal(err)
	}
	reg := models.New(st)
	arts, _ := models.DirArtifacts(dir)
	v, err := reg.Register(context.Background(), "ctr", arts, "", models.Meta{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Promote(context.Background(), "ctr", "production", v.Version, models.Actor{Name: "test"}, "first"); err != nil {
		t.Fatal(err)
	}
	res, err = nodetest.Run(t, ev.Run, evIn, nil)
	if err != nil {
		t.Fatal(err)
	}
	evaluation := res["evaluation"].(map[string]any)
	if res["baseline_version"] != "v1" || evaluation["baseline"].(map[string]any)["auc"] != auc {
		t.Fatalf("against production: %v", res)
	}
	var report evaluate.EvaluationReport
	mk, _ := objects.StoreKey(st, res["metrics_uri"].(string))
	if err := objects.GetJSON(context.Background(), st, mk, &report); err != nil || report.Baseline == nil || len(report.Candidate.Slices) != 1 {
		t.Fatalf("metrics file %+v: %v", report, err)
	}
	// The gate decides from that evaluation.
	d := DecideGate(map[string]any{"evaluation": evaluation,
		"metrics": map[string]any{"auc": map[string]any{"direction": "higher_is_better", "min_absolute_change": 0}}})
	if d.Error != "" || !d.Result.Passed || d.Result.BaselineVersion != "v1" {
		t.Fatalf("gate: %+v", d)
	}
}
