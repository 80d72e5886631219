package train

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/internal/devkit/torchtest"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/activities/internal/objects"
	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/activities/split/splittest"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/npy"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/nodetype"
)

// The tests below run examples/torch/train.py and evaluate.py with the
// real PyTorch, as 2 ranks over gloo on the CPU.

func example(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "examples", "torch", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// logBuffer collects a logger's output, which is where the ranks' log
// lines (their pids) go.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var pidLine = regexp.MustCompile(`rank (\d+) of (\d+): pid (\d+)`)

// commLine is train.py's "communication: {...}" line as the node logs it
// (quoted).
var commLine = regexp.MustCompile(`communication: \{\\"ranks\\": 2, .*\\"allreduce_bytes_per_step\\": (\d+)`)

// ranksGone checks that the ranks whose pids the log names have ended.
func ranksGone(t *testing.T, log string, want int) {
	t.Helper()
	seen := map[string]bool{}
	for _, m := range pidLine.FindAllStringSubmatch(log, -1) {
		pid, _ := strconv.Atoi(m[3])
		if seen[m[1]] {
			continue // an earlier attempt's rank
		}
		seen[m[1]] = true
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("rank %s (pid %d) still runs", m[1], pid)
		}
	}
	if len(seen) != want {
		t.Errorf("the log names %d ranks' pids, want %d", len(seen), want)
	}
}

type torchSetup struct {
	st    *s3store.Store
	split string
	py    string
	log   *logBuffer
	tr    *Trainers
}

func newTorchSetup(t *testing.T, run string) *torchSetup {
	py := torchtest.Python(t)
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	s := &torchSetup{st: st, split: splittest.Write(t, st, run, 2000, 500), py: py, log: &logBuffer{}}
	s.tr = &Trainers{Store: st, Logger: slog.New(slog.NewTextHandler(s.log, nil)),
		Env: progenv.Policy{PassEnv: []string{"PYTHONDONTWRITEBYTECODE", "TRAIN_PY_EXIT_AT", "TRAIN_PY_HANG_AT", "TRAIN_PY_LOG_IDS"}}} // train.py's knobs
	return s
}

// node is a train node running train.py as 2 ranks on npy data: 2000
// rows in batches of 250, 16 steps over 2 epochs, a checkpoint every 2.
func (s *torchSetup) node(t *testing.T, run string, args ...string) nodetype.Input {
	argv := []any{s.py, example(t, "train.py"), "--epochs", "2", "--batch-size", "250", "--buckets", "4096", "--dim", "4", "--checkpoint-every", "2"}
	for _, a := range args {
		argv = append(argv, a)
	}
	return nodetype.Input{Pipeline: "test", RunID: run, Node: "train", Type: "train", With: map[string]any{
		"trainer": "command", "data": s.split, "data_format": "npy", "processes": 2, "argv": argv,
	}}
}

func TestTorchDDP(t *testing.T) {
	s := newTorchSetup(t, "t1")
	ctx := context.Background()
	start := time.Now()
	out, err := nodetest.Run(t, s.tr.Run, s.node(t, "t1"), nil)
	if err != nil {
		t.Fatalf("%v\n%s", err, s.log)
	}
	t.Logf("2 ranks trained %v steps in %v; outputs %v", out["steps"], time.Since(start), out)
	loss, ok := out["loss"].(float64)
	if out["steps"] != 16.0 || !ok || !(loss > 0 && loss < 0.7) || out["resumed_from"] != 0.0 || out["checkpoint"] == "" {
		t.Fatalf("outputs %v: want 16 steps with a finite loss below 0.7 and a checkpoint", out)
	}
	ranksGone(t, s.log.String(), 2)

	// The ranks all-reduce the gradients of the table rows a step touches,
	// not the whole table's (4096 rows of 1+4 float32s: 81,920 bytes).
	m := commLine.FindStringSubmatch(s.log.String())
	if m == nil {
		t.Fatalf("no communication line in the log:\n%s", s.log)
	}
	perStep, _ := strconv.Atoi(m[1])
	t.Logf("2 ranks all-reduced %d bytes per step", perStep)
	if perStep <= 0 || perStep >= 81920/4 {
		t.Errorf("%d bytes all-reduced per step, want some but well under the table's 81,920", perStep)
	}

	// One process (processes: 1, no torch.distributed) trains on the same
	// global batches: the same model, up to the order of float sums.
	one := s.node(t, "t1")
	one.With["processes"] = 1
	single, err := nodetest.Run(t, s.tr.Run, one, nil)
	if err != nil {
		t.Fatalf("one process: %v\n%s", err, s.log)
	}
	if single["steps"] != 16.0 || math.Abs(single["loss"].(float64)-loss) > 1e-4 {
		t.Errorf("one process: outputs %v; 2 ranks' loss %v", single, loss)
	}

	// The model folder, scored by evaluate.py on the eval data.
	dir := t.TempDir()
	key, _ := objects.StoreKey(s.st, out["model_uri"].(string))
	if _, err := objects.DownloadPrefix(ctx, s.st, key, filepath.Join(dir, "model")); err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Dim, Buckets  int
		Dense, Sparse []string
	}
	if b, err := os.ReadFile(filepath.Join(dir, "model", "meta.json")); err != nil || json.Unmarshal(b, &meta) != nil {
		t.Fatalf("meta.json: %v, %s", err, b)
	}
	if _, err := os.Stat(filepath.Join(dir, "model", "model.pt")); err != nil || meta.Dim != 4 || meta.Buckets != 4096 ||
		fmt.Sprint(meta.Dense, meta.Sparse) != "[x] [user_id]" {
		t.Fatalf("model folder: %v, meta %+v", err, meta)
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
		"RETRAIN_METRICS_OUT="+filepath.Join(dir, "metrics.json"), "RETRAIN_PREDICTIONS_OUT="+filepath.Join(dir, "predictions.npy"),
		"RETRAIN_MODEL_ROLE=candidate")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("evaluate.py: %v\n%s", err, b)
	}
	var metrics struct {
		Rows    int `json:"rows"`
		Overall struct {
			AUC     float64 `json:"auc"`
			LogLoss float64 `json:"log_loss"`
		} `json:"overall"`
		Slices map[string]struct {
			Rows int `json:"rows"`
		} `json:"slices"`
	}
	b, _ := os.ReadFile(filepath.Join(dir, "metrics.json"))
	if err := json.Unmarshal(b, &metrics); err != nil {
		t.Fatalf("metrics.json: %v: %s", err, b)
	}
	// The labels follow sigmoid(2x + user effect - 1): a model that learnt
	// anything ranks well above chance.
	if metrics.Rows != 500 || !(metrics.Overall.AUC > 0.7) || !(metrics.Overall.LogLoss > 0 && metrics.Overall.LogLoss < 0.69) || metrics.Slices["2"].Rows != 500 {
		t.Errorf("metrics %s", b)
	}
	f, err := os.Open(filepath.Join(dir, "predictions.npy"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	preds, shape, err := npy.Read[float32](f)
	if err != nil || len(preds) != 500 || fmt.Sprint(shape) != "[500]" {
		t.Fatalf("predictions.npy: %d values of shape %v, %v", len(preds), shape, err)
	}
	for _, p := range preds {
		if !(p > 0 && p < 1) {
			t.Fatalf("prediction %v", p)
		}
	}
	t.Logf("evaluate.py: %s", b)
}

// TestTorchRankFailsThenResumes: rank 1 exits 7 after step 5, which fails
// the attempt naming rank 1 and stops rank 0; the retry resumes from the
// checkpoint of step 4 and ends where an uninterrupted run would.
func TestTorchRankFailsThenResumes(t *testing.T) {
	s := newTorchSetup(t, "t2")
	in := s.node(t, "t2")
	t.Setenv("TRAIN_PY_EXIT_AT", "1:5")
	start := time.Now()
	_, err := nodetest.Run(t, s.tr.Run, in, nil)
	if err == nil || !strings.Contains(err.Error(), "rank 1 of 2") || !strings.Contains(err.Error(), "exited with code 7") ||
		!strings.Contains(err.Error(), "TRAIN_PY_EXIT_AT") {
		t.Fatalf("first attempt: %v, want rank 1's exit 7 named\n%s", err, s.log)
	}
	if typ := nodetest.ErrType(err); typ == errtype.Diverged || typ == errtype.BadInput {
		t.Errorf("error type %s: a crashed rank is retried", typ)
	}
	t.Logf("first attempt failed after %v: %v", time.Since(start), err)
	ranksGone(t, s.log.String(), 2)

	// The retry gets the last heartbeat, as Temporal gives it: the step
	// and checkpoint the store recorded.
	fp, err := checkpoint.Fingerprint(in.With)
	if err != nil {
		t.Fatal(err)
	}
	var hb TrainProgress
	if err := objects.GetJSON(context.Background(), s.st, fmt.Sprintf("checkpoints/test/t2/train/%s/command/resume.json", fp), &hb); err != nil {
		t.Fatal(err)
	}
	if hb.CheckpointStep != 4 {
		t.Fatalf("recorded %+v, want the checkpoint of step 4", hb)
	}
	hb.Step = 5
	t.Setenv("TRAIN_PY_EXIT_AT", "")
	start = time.Now()
	out, err := nodetest.Run(t, s.tr.Run, in, hb)
	if err != nil {
		t.Fatalf("retry: %v\n%s", err, s.log)
	}
	t.Logf("retry resumed from step %v and ran to %v in %v", out["resumed_from"], out["steps"], time.Since(start))
	if out["resumed_from"] != 4.0 || out["steps"] != 16.0 || !strings.Contains(s.log.String(), "at step 4") {
		t.Fatalf("outputs %v: want steps 5 to 16 after resuming from 4", out)
	}
	var curve []CurvePoint
	key, _ := objects.StoreKey(s.st, out["loss_curve_uri"].(string))
	if err := objects.GetJSON(context.Background(), s.st, key, &curve); err != nil || len(curve) != 16 {
		t.Fatalf("curve of %d points, %v: want steps 1-4 of the first attempt and 5-16 of the retry", len(curve), err)
	}
	for i, p := range curve {
		if p.Step != int64(i+1) || math.IsNaN(p.Loss) {
			t.Fatalf("curve point %d: %+v", i, p)
		}
	}
}

// TestTorchDivergence: a learning rate of 1e6 blows the embeddings up in
// the first step; the guard reads it from rank 0's progress line, stops
// both ranks and fails for good.
// TestTorchHangNamesTheStuckRank: rank 1 sleeps after step 3 while rank 0
// waits for it in step 4's all-reduce; both stand at step 3. After
// hang_timeout the node asks both for their stacks (train.py prints them on
// SIGUSR1) and names rank 1, the one not in a collective, with its frame.
func TestTorchHangNamesTheStuckRank(t *testing.T) {
	s := newTorchSetup(t, "t5")
	in := s.node(t, "t5")
	in.With["hang_timeout"] = "4s"
	t.Setenv("TRAIN_PY_HANG_AT", "1:3")
	start := time.Now()
	_, err := nodetest.Run(t, s.tr.Run, in, nil)
	if err == nil || !strings.Contains(err.Error(), "rank 1 has not advanced past step 3") ||
		!strings.Contains(err.Error(), "is not in a collective: its stack is at File") || !strings.Contains(err.Error(), "train.py") {
		t.Fatalf("error %v, want rank 1 named by its stack\n%s", err, s.log)
	}
	if typ := nodetest.ErrType(err); typ == errtype.Diverged || typ == errtype.BadInput {
		t.Errorf("error type %s: a hang is retried", typ)
	}
	t.Logf("stopped after %v: %v", time.Since(start).Round(100*time.Millisecond), err)
	ranksGone(t, s.log.String(), 2)
}

func TestTorchDivergence(t *testing.T) {
	s := newTorchSetup(t, "t3")
	_, err := nodetest.Run(t, s.tr.Run, s.node(t, "t3", "--lr", "1e6"), nil)
	if nodetest.ErrType(err) != errtype.Diverged || !strings.Contains(err.Error(), "diverged at step 1") {
		t.Fatalf("error %v, want %s naming step 1\n%s", err, errtype.Diverged, s.log)
	}
	t.Logf("divergence: %v", err)
	ranksGone(t, s.log.String(), 2)
}

// TestTorchResumeRankWithoutCheckpoint runs train.py's ranks by hand, as
// two hosts would: only rank 0 has the checkpoint file it resumes from
// (rank 1's RETRAIN_RESUME_FROM names a path its host lacks), and rank 1
// takes rank 0's weights, Adagrad state and step. The run ends where an
// uninterrupted one does.
func TestTorchResumeRankWithoutCheckpoint(t *testing.T) {
	s := newTorchSetup(t, "t4")
	ctx := context.Background()
	dir := t.TempDir()
	sd, err := split.Open(ctx, s.st, s.split)
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "train")
	if err := sd.Localize(ctx, s.st, split.TrainDataset, data, split.FormatNPY); err != nil {
		t.Fatal(err)
	}
	args := []string{example(t, "train.py"), "--epochs", "2", "--batch-size", "250", "--buckets", "4096", "--dim", "4", "--checkpoint-every", "2"}
	// ranks runs train.py as n ranks, rank r resuming from resume[r], and
	// returns rank 0's last progress line and the last rank's output.
	ranks := func(name string, n int, resume []string, extra ...string) (map[string]any, string) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		ckpt := filepath.Join(dir, name)
		if err := os.MkdirAll(ckpt, 0o755); err != nil {
			t.Fatal(err)
		}
		var cmds []*exec.Cmd
		outs := make([]*bytes.Buffer, n)
		for r := range n {
			cmd := exec.Command(s.py, append(append([]string(nil), args...), extra...)...)
			cmd.Env = append(os.Environ(), "RETRAIN_TRAIN_DATA="+data, "RETRAIN_CHECKPOINT_URI="+ckpt, "RETRAIN_RESUME_FROM="+resume[r])
			if n > 1 {
				cmd.Env = append(cmd.Env, "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port), "RANK="+strconv.Itoa(r),
					"LOCAL_RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n), "LOCAL_WORLD_SIZE="+strconv.Itoa(n))
			}
			outs[r] = &bytes.Buffer{}
			cmd.Stdout, cmd.Stderr = outs[r], outs[r]
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			cmds = append(cmds, cmd)
		}
		for r, cmd := range cmds {
			if err := cmd.Wait(); err != nil {
				t.Fatalf("%s: rank %d: %v\n%s", name, r, err, outs[r])
			}
		}
		var last map[string]any
		for _, line := range strings.Split(outs[0].String(), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["loss"] != nil {
				last = rec
			}
		}
		if last == nil {
			t.Fatalf("%s: no progress line:\n%s", name, outs[0])
		}
		return last, outs[n-1].String()
	}
	whole, _ := ranks("whole", 2, []string{"", ""})
	ranks("first", 1, []string{""}, "--steps", "6")
	ckpt := filepath.Join(dir, "first", "step-000000000006.pt")
	resumed, rank1 := ranks("resumed", 2, []string{ckpt, filepath.Join(dir, "elsewhere", "step-000000000006.pt")})
	if !strings.Contains(rank1, "is not on this host; taking rank 0's state") {
		t.Errorf("rank 1's output does not say it took rank 0's state:\n%s", rank1)
	}
	t.Logf("uninterrupted: loss %v at step %v; resumed: loss %v at step %v", whole["loss"], whole["step"], resumed["loss"], resumed["step"])
	if whole["step"] != 16.0 || resumed["step"] != 16.0 || math.Abs(whole["loss"].(float64)-resumed["loss"].(float64)) > 1e-4 {
		t.Errorf("uninterrupted: %v; resumed from step 6 with rank 1 lacking the file: %v", whole, resumed)
	}
}
