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

	// Streamed: each rank reads its npy pieces as they come (a window of
	// 2 on its host's disk), trains every row of each epoch once, to a
	// model as good.
	in = s.node(t, "ts4")
	in.With["shard_data"], in.With["stream_data"], in.With["stream_window"] = true, true, 2
	t.Setenv("TRAIN_PY_LOG_IDS", "request_id")
	mark := len(s.log.String())
	streamed, err := nodetest.Run(t, s.tr.Run, in, nil)
	if err != nil {
		t.Fatalf("streamed: %v\n%s", err, s.log)
	}
	a3 := s.evalAUC(t, streamed)
	t.Logf("streamed, a window of 2 pieces: AUC %.4f (loss %.4f), steps %v; data %v", a3, streamed["loss"], streamed["steps"], streamed["data"])
	if math.Abs(a1-a3) > 0.01 || streamed["steps"] != whole["steps"] {
		t.Errorf("streamed: AUC %.4f after %v steps, whole %.4f after %v: want within 0.01, the same steps", a3, streamed["steps"], a1, whole["steps"])
	}
	epochs, err := epochSums(s.log.String()[mark:], 0)
	if err != nil {
		t.Fatal(err)
	}
	checkEveryRowOnce(t, epochs, 2000, 2)
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

	epochs, err := epochSums(firstLog, 4)
	if err != nil {
		t.Fatal(err)
	}
	more, err := epochSums(retryLog, 0)
	if err != nil {
		t.Fatal(err)
	}
	for e, m := range more {
		if epochs[e] == nil {
			epochs[e] = m
			continue
		}
		for i := range epochs[e] {
			epochs[e][i].Add(epochs[e][i], m[i])
		}
	}
	checkEveryRowOnce(t, epochs, 2000, 2)
}

// epochSums adds up train.py's shard-step lines in log by epoch: the
// count, sum and sum of squares of the ids of the rows trained (up to
// step upTo, if above 0). A step a rank logged twice is an error.
func epochSums(log string, upTo int64) (map[string][]*big.Int, error) {
	out := map[string][]*big.Int{}
	seen := map[string]bool{}
	for _, m := range shardStep.FindAllStringSubmatch(log, -1) {
		var step int64
		fmt.Sscan(m[4], &step)
		if m[1] != "full" || (upTo > 0 && step > upTo) {
			continue // after the checkpoint: lost with the attempt
		}
		key := m[2] + " " + m[3] + " " + m[4]
		if seen[key] {
			return nil, fmt.Errorf("rank %s logged step %s twice", m[3], m[4])
		}
		seen[key] = true
		if out[m[2]] == nil {
			out[m[2]] = []*big.Int{new(big.Int), new(big.Int), new(big.Int)}
		}
		for i, acc := range out[m[2]] {
			v, _ := new(big.Int).SetString(m[5+i], 10)
			acc.Add(acc, v)
		}
	}
	return out, nil
}

// checkEveryRowOnce checks that each of n epochs' sums are those of the
// split's rows 0 to rows-1 (ids 1<<32 | i), each once.
func checkEveryRowOnce(t *testing.T, epochs map[string][]*big.Int, rows int64, n int) {
	t.Helper()
	want := []*big.Int{new(big.Int), new(big.Int), new(big.Int)}
	for i := range rows {
		id := big.NewInt(1<<32 | i)
		want[0].Add(want[0], big.NewInt(1))
		want[1].Add(want[1], id)
		want[2].Add(want[2], new(big.Int).Mul(id, id))
	}
	if len(epochs) != n {
		t.Fatalf("rows logged for %d epochs, want %d", len(epochs), n)
	}
	for e := range n {
		got := epochs[fmt.Sprint(e)]
		t.Logf("epoch %d: %v rows, id sum %v, sum of squares %v; the split: %v, %v, %v", e, got[0], got[1], got[2], want[0], want[1], want[2])
		for i := range want {
			if got[i].Cmp(want[i]) != 0 {
				t.Errorf("epoch %d: the rows trained are not every row once", e)
				break
			}
		}
	}
}
