package train

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/activities/internal/objects"
	"github.com/retrain-ml/retrain/activities/split"
)

// evalAUC scores the model a train node wrote with evaluate.py on the
// split's eval data.
func (s *torchSetup) evalAUC(t *testing.T, out map[string]any) float64 {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	key, _ := objects.StoreKey(s.st, out["model_uri"].(string))
	if _, err := objects.DownloadPrefix(ctx, s.st, key, filepath.Join(dir, "model")); err != nil {
		t.Fatal(err)
	}
	sd, err := split.Open(ctx, s.st, s.split)
	if err != nil {
		t.Fatal(err)
	}
	if err := sd.Localize(ctx, s.st, split.EvalDataset, filepath.Join(dir, "eval"), split.FormatNPY); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(s.py, example(t, "evaluate.py"))
	cmd.Env = append(os.Environ(), "RETRAIN_MODEL_DIR="+filepath.Join(dir, "model"), "RETRAIN_EVAL_DATA="+filepath.Join(dir, "eval"),
		"RETRAIN_METRICS_OUT="+filepath.Join(dir, "metrics.json"), "RETRAIN_MODEL_ROLE=candidate")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("evaluate.py: %v\n%s", err, b)
	}
	var m struct {
		Overall struct {
			AUC float64 `json:"auc"`
		} `json:"overall"`
	}
	b, _ := os.ReadFile(filepath.Join(dir, "metrics.json"))
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("metrics.json: %v: %s", err, b)
	}
	return m.Overall.AUC
}

// TestTorchShardData: train.py on 2 ranks with shard_data (each rank
// reading only its half) trains as many steps as without, to an AUC within
// 0.01 of the same ranks reading the whole split.
func TestTorchShardData(t *testing.T) {
	s := newTorchSetup(t, "ts1")
	whole, err := nodetest.Run(t, s.tr.Run, s.node(t, "ts1"), nil)
	if err != nil {
		t.Fatalf("%v\n%s", err, s.log)
	}
	in := s.node(t, "ts2")
	in.With["shard_data"] = true
	sharded, err := nodetest.Run(t, s.tr.Run, in, nil)
	if err != nil {
		t.Fatalf("sharded: %v\n%s", err, s.log)
	}
	loss, ok := sharded["loss"].(float64)
	if sharded["steps"] != whole["steps"] || !ok || !(loss > 0 && loss < 0.7) {
		t.Fatalf("sharded outputs %v; whole %v: want the same steps, a finite loss below 0.7", sharded, whole)
	}
	a1, a2 := s.evalAUC(t, whole), s.evalAUC(t, sharded)
	t.Logf("2 ranks, 2000 rows: AUC %.4f reading the whole split, %.4f sharded (loss %.4f, %.4f); data %v", a1, a2, whole["loss"], loss, sharded["data"])
	if math.Abs(a1-a2) > 0.01 {
		t.Errorf("AUC %.4f sharded, %.4f whole: want within 0.01", a2, a1)
	}
}
