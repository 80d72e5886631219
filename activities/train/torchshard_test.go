package train

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/activities/internal/objects"
	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/internal/checkpoint"
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

// shardStep is train.py's TRAIN_PY_LOG_IDS line, as the node logs it.
var shardStep = regexp.MustCompile(`shard-step world=2 phase=(\w+) epoch=(\d+) rank=(\d) step=(\d+) count=(\d+) sum=(\d+) sumsq=(\d+)`)

// TestTorchShardDataResumes: train.py on 2 ranks with shard_data; rank 1
// exits after step 5, and the retry (the same world size, the same
// shares) resumes from the checkpoint of step 4, whose line said where
// the ranks stood (shard_epoch 0, shard_done), and goes on in its share
// after those rows: the rows the ranks logged (TRAIN_PY_LOG_IDS), the
// first attempt's up to step 4 and the retry's, are every row of each
// epoch once.
func TestTorchShardDataResumes(t *testing.T) {
	s := newTorchSetup(t, "ts3")
	in := s.node(t, "ts3")
	in.With["shard_data"] = true
	t.Setenv("TRAIN_PY_LOG_IDS", "request_id")
	t.Setenv("TRAIN_PY_EXIT_AT", "1:5")
	if _, err := nodetest.Run(t, s.tr.Run, in, nil); err == nil {
		t.Fatalf("first attempt succeeded, want rank 1's exit\n%s", s.log)
	}
	firstLog := s.log.String()
	fp, err := checkpoint.Fingerprint(fingerprinted(in.With, With{ShardData: true}))
	if err != nil {
		t.Fatal(err)
	}
	var hb TrainProgress
	if err := objects.GetJSON(context.Background(), s.st, fmt.Sprintf("checkpoints/test/ts3/train/%s/command/resume.json", fp), &hb); err != nil {
		t.Fatal(err)
	}
	if hb.CheckpointStep != 4 || hb.Shards == nil {
		t.Fatalf("recorded %+v, want the checkpoint of step 4 with the ranks' position", hb)
	}
	pos, _ := json.Marshal(hb.Shards)
	t.Logf("first attempt failed; the checkpoint of step 4 stands at %s", pos)
	hb.Step = 5
	t.Setenv("TRAIN_PY_EXIT_AT", "")
	out, err := nodetest.Run(t, s.tr.Run, in, hb)
	if err != nil {
		t.Fatalf("retry: %v\n%s", err, s.log)
	}
	if out["resumed_from"] != 4.0 {
		t.Fatalf("outputs %v: want resumed from step 4", out)
	}
	retryLog := s.log.String()[len(firstLog):]

	var rows int64 = 2000
	type tally struct{ count, sum, sumsq *big.Int }
	epochs := map[string]tally{}
	seen := map[string]bool{}
	add := func(log string, upTo int64) {
		for _, m := range shardStep.FindAllStringSubmatch(log, -1) {
			var step int64
			fmt.Sscan(m[4], &step)
			key := m[2] + " " + m[3] + " " + m[4]
			if m[1] != "full" || (upTo > 0 && step > upTo) {
				continue // after the checkpoint: lost with the attempt
			}
			if seen[key] {
				t.Fatalf("rank %s logged step %s twice", m[3], m[4])
			}
			seen[key] = true
			e, ok := epochs[m[2]]
			if !ok {
				e = tally{new(big.Int), new(big.Int), new(big.Int)}
				epochs[m[2]] = e
			}
			for i, acc := range []*big.Int{e.count, e.sum, e.sumsq} {
				v, _ := new(big.Int).SetString(m[5+i], 10)
				acc.Add(acc, v)
			}
		}
	}
	add(firstLog, 4)
	add(retryLog, 0)
	want := tally{new(big.Int), new(big.Int), new(big.Int)}
	for i := range rows {
		id := big.NewInt(1<<32 | i)
		want.count.Add(want.count, big.NewInt(1))
		want.sum.Add(want.sum, id)
		want.sumsq.Add(want.sumsq, new(big.Int).Mul(id, id))
	}
	if len(epochs) != 2 {
		t.Fatalf("rows logged for epochs %v, want 0 and 1\n%s", epochs, s.log)
	}
	for e, got := range epochs {
		t.Logf("epoch %s: %s rows, id sum %s, sum of squares %s; the split: %s, %s, %s", e, got.count, got.sum, got.sumsq, want.count, want.sum, want.sumsq)
		if got.count.Cmp(want.count) != 0 || got.sum.Cmp(want.sum) != 0 || got.sumsq.Cmp(want.sumsq) != 0 {
			t.Errorf("epoch %s: the rows trained are not every row once", e)
		}
	}
}
