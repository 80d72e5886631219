package train

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/activities/internal/objects"
	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/activities/split/splittest"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/gpu"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/nodetype"
)

// rankScript is a fake rank in sh: it records its environment and pid in
// $OUT/rank-$RANK.*, starts a child that would outlive it (its pid in
// $OUT/child-$RANK.pid), and then does what $ACT_$RANK says: exit N, or
// sleep.
const rankScript = `
env | grep -E '^(MASTER_|RANK|LOCAL_|WORLD_SIZE|RETRAIN_|CUDA_VISIBLE_DEVICES)' | sort > "$OUT/rank-$RANK.env"
echo $$ > "$OUT/rank-$RANK.pid"
sleep 300 & echo $! > "$OUT/child-$RANK.pid"
eval "act=\$ACT_$RANK"
case "$act" in
exit*) sleep 0.2; echo "rank $RANK giving up" >&2; exit ${act#exit } ;;
*) wait ;;
esac
`

func startFakeRanks(t *testing.T, n int, env ...string) (*rankGroup, string) {
	t.Helper()
	out := t.TempDir()
	base := exec.Command("sh", "-c", rankScript)
	base.Env = append(os.Environ(), append(env, "OUT="+out)...)
	port, err := freePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := os.Create(filepath.Join(out, "stdout0"))
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	g, err := startRanks(base, localLayout("test-host", n, port), 0, stdout, quiet, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Wait until every rank has started its child.
	for rank := range n {
		waitFile(t, filepath.Join(out, "child-"+strconv.Itoa(rank)+".pid"))
	}
	return g, out
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil && strings.HasSuffix(string(b), "\n") {
			return
		}
	}
	t.Fatalf("%s never written", path)
}

// gone checks that the processes whose pids the files hold are gone.
func gone(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		// A killed child of a killed rank is reparented and reaped by
		// init; give that a moment.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
				break
			} else if time.Now().After(deadline) {
				t.Errorf("process %d (%s) still runs", pid, filepath.Base(p))
				break
			}
		}
	}
}

func TestRanksEnvAndStopAll(t *testing.T) {
	g, out := startFakeRanks(t, 3, "ACT_1=exit 7")
	start := time.Now()
	err := g.wait(context.Background())
	var re *RankError
	if !errors.As(err, &re) || re.Rank != 1 || re.Ranks != 3 || re.Code != 7 || !strings.Contains(re.Stderr, "rank 1 giving up") {
		t.Fatalf("error %v, want rank 1 of 3's exit 7 with its stderr", err)
	}
	if !strings.Contains(err.Error(), "rank 1 of 3 (sh) exited with code 7") {
		t.Errorf("message %q", err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("stopping the other ranks took %v: they should get SIGTERM at once", d)
	}
	gone(t, filepath.Join(out, "rank-0.pid"), filepath.Join(out, "rank-2.pid"),
		filepath.Join(out, "child-0.pid"), filepath.Join(out, "child-1.pid"), filepath.Join(out, "child-2.pid"))

	var port string
	for rank := range 3 {
		b, err := os.ReadFile(filepath.Join(out, "rank-"+strconv.Itoa(rank)+".env"))
		if err != nil {
			t.Fatal(err)
		}
		env := string(b)
		r := strconv.Itoa(rank)
		for _, want := range []string{"MASTER_ADDR=127.0.0.1\n", "RANK=" + r + "\n", "LOCAL_RANK=" + r + "\n", "WORLD_SIZE=3\n", "LOCAL_WORLD_SIZE=3\n"} {
			if !strings.Contains(env, want) {
				t.Errorf("rank %d's environment lacks %s:\n%s", rank, want, env)
			}
		}
		_, p, _ := strings.Cut(env, "MASTER_PORT=")
		p, _, _ = strings.Cut(p, "\n")
		if n, err := strconv.Atoi(p); err != nil || n <= 0 || (port != "" && p != port) {
			t.Errorf("rank %d: MASTER_PORT %q (rank 0's %q)", rank, p, port)
		}
		port = p
	}
}

func TestRanksCancelStopsAll(t *testing.T) {
	g, out := startFakeRanks(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := g.wait(ctx); err != nil {
		t.Fatalf("a cancelled wait blames a rank: %v", err)
	}
	gone(t, filepath.Join(out, "rank-0.pid"), filepath.Join(out, "rank-1.pid"),
		filepath.Join(out, "child-0.pid"), filepath.Join(out, "child-1.pid"))
}

func TestProcessCount(t *testing.T) {
	for _, tt := range []struct {
		w    With
		want int
	}{
		{With{Argv: []string{"python3", "train.py"}}, 1},
		{With{Argv: []string{"python3", "train.py"}, GPUs: 4}, 4},
		{With{Argv: []string{"python3", "train.py"}, GPUs: 4, Processes: 1}, 1},
		{With{Argv: []string{"python3", "train.py"}, Processes: 3}, 3},
		{With{Argv: []string{"torchrun", "--nproc_per_node", "4", "train.py"}, GPUs: 4}, 1},
		{With{Argv: []string{"sh", "-c", "torchrun --nproc_per_node $RETRAIN_GPUS train.py"}, GPUs: 2}, 1},
		{With{Argv: []string{"python3", "-m", "torch.distributed.run", "train.py"}, GPUs: 2}, 1},
	} {
		if got := processCount(tt.w); got != tt.want {
			t.Errorf("%v, gpus %d, processes %d: %d ranks, want %d", tt.w.Argv, tt.w.GPUs, tt.w.Processes, got, tt.want)
		}
	}
}

// progressRanks is a trainer in sh for the node's ranks: rank 0 prints
// progress; rank 1 prints a NaN loss on its stdout, which the node must
// not read as progress, and fails when FAIL_RANK1 is set.
const progressRanks = `
env | grep -E '^(MASTER_|RANK|LOCAL_|WORLD_SIZE|CUDA_VISIBLE_DEVICES|RETRAIN_GPUS)' | sort > "$RETRAIN_MODEL_OUT/rank-$RANK.env"
if [ "$RANK" = 0 ]; then
  for i in 1 2 3; do echo "{\"step\": $i, \"loss\": 0.$((6-i))}"; sleep 0.1; done
  if [ -n "$FAIL_RANK1" ]; then sleep 30; fi
  echo weights > "$RETRAIN_MODEL_OUT/model.txt"
else
  echo '{"step": 1, "loss": NaN}'
  if [ -n "$FAIL_RANK1" ]; then echo "rank 1 out of memory" >&2; exit 9; fi
fi
`

// TestCommandRanks runs the node with the ranks of a sh program: with
// gpus: 2 and no processes, two ranks, each with the leased GPUs and the
// rendezvous variables; a failing rank fails the attempt (retryably) and
// stops rank 0.
func TestCommandRanks(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	split := splittest.Write(t, st, "k1", 200, 50)
	node := func(run string) nodetype.Input {
		return nodetype.Input{Pipeline: "test", RunID: run, Node: "train", Type: "train",
			With: map[string]any{"trainer": "command", "data": split, "argv": []any{"sh", "-c", progressRanks}, "gpus": 2}}
	}
	tr := &Trainers{Store: st, Logger: quiet, GPUs: gpu.NewAllocator(fakeGPUs{2}, gpu.ByUUID),
		Env: progenv.Policy{PassEnv: []string{"FAIL_RANK1"}}} // the fake trainer's knob
	out, err := nodetest.Run(t, tr.Run, node("k1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if out["steps"] != 3.0 || out["loss"] != 0.3 {
		t.Fatalf("outputs %v: want rank 0's 3 steps", out)
	}
	key, _ := objects.StoreKey(st, out["model_uri"].(string))
	for rank := range 2 {
		b, err := objects.ReadObject(context.Background(), st, key+"rank-"+strconv.Itoa(rank)+".env")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"CUDA_VISIBLE_DEVICES=GPU-0,GPU-1", "RETRAIN_GPUS=2", "RANK=" + strconv.Itoa(rank), "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT="} {
			if !strings.Contains(string(b), want) {
				t.Errorf("rank %d's environment lacks %s:\n%s", rank, want, b)
			}
		}
	}

	t.Setenv("FAIL_RANK1", "1")
	start := time.Now()
	_, err = nodetest.Run(t, tr.Run, node("k2"), nil)
	if err == nil || !strings.Contains(err.Error(), "rank 1 of 2 (sh) exited with code 9") || !strings.Contains(err.Error(), "rank 1 out of memory") {
		t.Fatalf("error %v, want one naming rank 1, its exit and its stderr", err)
	}
	if typ := nodetest.ErrType(err); typ == errtype.Diverged || typ == errtype.BadInput {
		t.Errorf("error type %s: a crashed rank is retried", typ)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the attempt took %v: rank 0 was not stopped", d)
	}
	if tr.GPUs.Leased() != 0 {
		t.Errorf("%d GPUs still leased", tr.GPUs.Leased())
	}
}
