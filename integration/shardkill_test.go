package integration

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/activities/split/splittest"
	"github.com/retrain-ml/retrain/runs"
)

// shardStepper is a command trainer rank in Python's standard library
// alone that trains its share in steps of 10 rows, in lockstep with the
// other ranks (a barrier a step over TCP to rank 0 at MASTER_ADDR), and
// logs each step's rows (count, sum and sum of squares of their request
// ids). Rank 0 writes a checkpoint every 10 steps, its line saying where
// the ranks stand in their shares (shard_epoch, shard_done). Resumed, it
// trains the rest of the epoch it is given (RETRAIN_SHARD_REST_DATA),
// else goes on in its share from the checkpoint. While $OUT/hold exists,
// host 1's ranks stop after step 30, so the kill lands mid-epoch. One
// epoch.
const shardStepper = `
import array, json, os, socket, struct, sys, time
env = os.environ
B, EVERY, PAUSE = 10, 10, 0.05
rank, world = int(env.get("RANK", "0")), int(env.get("WORLD_SIZE", "1"))
def ids_of(d):
    try:
        b = open(os.path.join(d, "request_id.npy"), "rb").read()
    except FileNotFoundError:
        return []
    a = array.array("q")
    a.frombytes(b[10 + struct.unpack("<H", b[8:10])[0]:])
    return list(a)
# A barrier a step over TCP: every rank tells rank 0 whether it has rows
# left; rank 0 answers g (go on) or e (the epoch is over).
peers, up = [], None
if world > 1:
    addr, port = env["MASTER_ADDR"], int(env["MASTER_PORT"])
    if rank == 0:
        srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("", port)); srv.listen(world)
        peers = [srv.accept()[0] for _ in range(world - 1)]
    else:
        for _ in range(600):
            try:
                up = socket.create_connection((addr, port)); break
            except OSError:
                time.sleep(0.1)
def recv1(s):
    b = s.recv(1)
    if not b:
        sys.exit("a peer is gone")
    return b
def barrier(more):
    if world == 1:
        return more
    if rank == 0:
        more = any([more] + [recv1(p) == b"1" for p in peers])
        for p in peers:
            p.sendall(b"g" if more else b"e")
        return more
    up.sendall(b"1" if more else b"0")
    return recv1(up) == b"g"
ckpt = None
if env.get("RETRAIN_RESUME_FROM"):
    ckpt = json.load(open(env["RETRAIN_RESUME_FROM"]))
rest = env.get("RETRAIN_SHARD_REST_DATA")
# off: how far every rank went in its share, in the share's order (a rank
# whose share is shorter has trained all of it): shard_done.
if rest:
    phase, ids, off = "rest", ids_of(rest), int(env["RETRAIN_SHARD_REST_DONE"])
else:
    phase, ids, off = "full", ids_of(env["RETRAIN_TRAIN_DATA"]), (ckpt["off"] if ckpt else 0)
step = ckpt["step"] if ckpt else 0
hold = os.path.join(env["OUT"], "hold")
while True:
    if env.get("NODE_RANK") == "1" and step == 30 and os.path.exists(hold):
        time.sleep(3600)  # host 1 stops here until its worker is killed
    step += 1
    batch = ids[off:off + B]
    off += B
    if batch:
        print("shard-step world=%d phase=%s epoch=0 rank=%d step=%d count=%d sum=%d sumsq=%d" % (world, phase, rank, step, len(batch), sum(batch), sum(i * i for i in batch)), flush=True)
    time.sleep(PAUSE)
    more = barrier(off < len(ids))
    line = {"step": step, "loss": 0.5}
    if rank == 0 and step % EVERY == 0 and more:
        path = os.path.join(env["RETRAIN_CHECKPOINT_URI"], "step-%d.json" % step)
        json.dump({"step": step, "phase": phase, "off": off}, open(path, "w"))
        line.update(checkpoint=path, shard_epoch=0, shard_done=off)
    print(json.dumps(line), flush=True)
    if not more:
        break
if rank == 0:
    open(os.path.join(env["RETRAIN_MODEL_OUT"], "model.txt"), "w").write("weights")
`

// shardStepLine is the line the stand-in and train.py (TRAIN_PY_LOG_IDS)
// log for each step's rows of a rank.
var shardStepLine = regexp.MustCompile(`shard-step world=(\d+) phase=(\w+) epoch=(\d+) rank=(\d+) step=(\d+) count=(\d+) sum=(\d+) sumsq=(\d+)`)

// TestShardedGangKilledMidEpoch: a gang of 2 hosts × 2 ranks with
// shard_data trains an epoch of 4000 rows; host h1's worker is SIGKILLed
// mid-epoch (its ranks stopped after step 30, the checkpoint of step 30
// stored), and the node fails. The run started again under its id with 1
// rank a host (2, not 4) resumes from that checkpoint and trains the
// rest of the epoch on fresh shares. The rows the ranks logged, those of
// the first gang up to the checkpoint and all of the second's, are every
// row of the epoch once: count, sum and sum of squares of their ids.
func TestShardedGangKilledMidEpoch(t *testing.T) {
	parallelFor(t, 45*time.Second)
	if testing.Short() {
		t.Skip("builds retrain-worker and runs ranks in two worker processes")
	}
	e := newGangEnvOn(t, &torchEnv{retrainEnv: newRetrainEnv(t, true)})
	out := t.TempDir()
	hold := filepath.Join(out, "hold")
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	killMidEpoch(t, e, killCase{
		name: "sharded-kill", processes: 2, rows: 4000, epochs: 1, at: 30,
		resume: map[string]any{"processes": 1}, resumeHost1: true,
		with: fmt.Sprintf("      env: {OUT: %q}\n      argv: [\"python3\", \"-c\", %q]\n", out, shardStepper),
		release: func() {
			if err := os.Remove(hold); err != nil {
				t.Fatal(err)
			}
		},
	})
}

// TestTorchShardedKilledMidEpoch is TestShardedGangKilledMidEpoch with
// examples/torch/train.py as the trainer: 2 hosts × 2 ranks, 2 epochs of
// 3950 rows (shares of 1000 and 950) in global batches of 100; rank 2 (on
// host h1) stops after step 20 (TRAIN_PY_HANG_AT), h1's worker is
// SIGKILLed, and the run again under its id on 1 host × 2 ranks trains
// the rest of epoch 0 (cut into 2 new shares), then epoch 1. Its data is
// streamed (stream_data, npy pieces of 100 rows read as they come)
// through a window of 3 pieces a rank. Epoch 0's rows trained, by the
// first gang up to its checkpoint and by the second in the rest, are
// every row once, and so are epoch 1's.
//
// RETRAIN_SHARD_KILL_ROWS=N runs it at N rows (files of 50,000 rows,
// streamed in pieces of that size, global batches of 4,096, the kill at
// step 100) to show the same at scale:
//
//	RETRAIN_SHARD_KILL_ROWS=2000000 go test ./integration/ \
//	  -run '^TestTorchShardedKilledMidEpoch$' -count=1 -v -timeout 60m
func TestTorchShardedKilledMidEpoch(t *testing.T) {
	parallelTorch(t, 45*time.Second)
	c := killCase{
		name: "torch-sharded-kill", processes: 2, rows: 3950, epochs: 2, at: 20, fileRows: 100,
		resume: map[string]any{"hosts": 1, "processes": 2},
	}
	batch, every := 100, 10
	if n := scaleEnv("RETRAIN_SHARD_KILL_ROWS", 0); n > 0 {
		c.rows, c.at, c.fileRows, c.limit = int(n), 100, 50000, 50*time.Minute
		batch, every = 4096, 50
	}
	e := newGangEnv(t)
	c.with = fmt.Sprintf("      stream_data: true\n      stream_window: 3\n      env: {TRAIN_PY_HANG_AT: \"2:%d\", TRAIN_PY_LOG_IDS: request_id}\n"+
		"      argv: [%q, %q, \"--epochs\", \"2\", \"--batch-size\", \"%d\", \"--buckets\", \"4096\", \"--dim\", \"4\", \"--checkpoint-every\", \"%d\"]\n",
		c.at, e.py, filepath.Join(e.scripts, "train.py"), batch, every)
	killMidEpoch(t, e, c)
}

// killCase is a trainer for killMidEpoch: with (the train node's env and
// argv) makes host h1's ranks stop after step at (until release, if
// given) and log their rows as shardStepLine; the first gang is 2 hosts ×
// processes, the second resume's params.
type killCase struct {
	name             string
	processes        int
	rows, epochs, at int
	with             string
	release          func()
	resume           map[string]any
	resumeHost1      bool          // start host h1 again for the second gang
	fileRows         int64         // rows a split file (and a streamed piece); 100 if 0
	limit            time.Duration // for each run; 5 minutes if 0
}

// killMidEpoch runs c's trainer as a gang of 2 hosts with shard_data,
// SIGKILLs host h1's worker once the checkpoint of step c.at is stored,
// runs the node again under the run's id with c.resume's world, and
// checks that the rows the ranks logged for each epoch are every row
// once: the first gang's up to the checkpoint (what came after it is lost
// with the attempt) and the second's rest, then its later epochs.
func killMidEpoch(t *testing.T, e *gangEnv, c killCase) {
	t.Helper()
	hosts := []*workerProc{e.start(t, 0), e.start(t, 1)}
	fileRows, limit := cmp.Or(c.fileRows, 100), cmp.Or(c.limit, 5*time.Minute)
	data := splittest.WriteFiles(t, e.store, c.name, c.rows, 100, fileRows)
	spec := fmt.Sprintf(`name: %s
params:
  data: {type: string}
  hosts: {type: int, default: 2}
  processes: {type: int, default: %d}
nodes:
  - id: train
    type: train
    queue: %s
    heartbeat: 15s
    retry: {max_attempts: 1}
    with:
      trainer: command
      data: ${params.data}
      data_format: npy
      hosts: ${params.hosts}
      processes: ${params.processes}
      shard_data: true
%s`, c.name, c.processes, e.queue, c.with)
	ctx, cancel := context.WithTimeout(context.Background(), 2*limit)
	defer cancel()
	req := runs.Request{Spec: []byte(spec), SpecFile: c.name + ".yaml", Params: map[string]any{"data": data}, TaskQueue: e.torchEnv.queue}
	run, err := runs.Start(ctx, tclient, req)
	if err != nil {
		t.Fatal(err)
	}
	// The checkpoint of step c.at, with the ranks' place in their shares.
	var stored struct {
		Step   int64           `json:"checkpoint_step"`
		Shards json.RawMessage `json:"shards"`
	}
	for deadline := time.Now().Add(limit - time.Minute); stored.Step < int64(c.at); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint at step %d within %v; host outputs:\n%s\n%s", c.at, limit-time.Minute, hosts[0].output(), hosts[1].output())
		}
		for o, err := range e.store.List(ctx, "checkpoints/"+c.name+"/"+run.ID+"/train/") {
			if err == nil && strings.HasSuffix(o.Key, "command/resume.json") {
				if b, _, err := e.store.GetBytes(ctx, o.Key); err == nil {
					_ = json.Unmarshal(b, &stored)
				}
			}
		}
	}
	hosts[1].kill(t)
	var pos bytes.Buffer
	_ = json.Compact(&pos, stored.Shards)
	t.Logf("SIGKILLed host h1's worker mid-epoch, at the checkpoint of step %d: position %s", stored.Step, pos.String())
	res, err := runs.Wait(ctx, tclient, run.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, runs.StatusFailed)
	firstWorld := 2 * c.processes
	t.Logf("the gang of %d ranks failed: %s", firstWorld, res.Error)

	// Again under its id, in another world size.
	if c.release != nil {
		c.release()
	}
	if c.resumeHost1 {
		hosts = append(hosts, e.start(t, 1))
	}
	req.ID, req.Params = run.ID, map[string]any{"data": data}
	for k, v := range c.resume {
		req.Params[k] = v
	}
	res = runRequest(t, req, limit)
	wantStatus(t, res, runs.StatusSucceeded)
	tr := node(t, res, "train")
	t.Logf("the resumed gang: resumed_from %v; %s", tr.Outputs["resumed_from"], tr.Outputs["summary"])
	if rf, _ := tr.Outputs["resumed_from"].(float64); int64(rf) != stored.Step {
		t.Fatalf("resumed_from %v, want the checkpoint of step %d", tr.Outputs["resumed_from"], stored.Step)
	}
	var restRows float64
	datas := []any{tr.Outputs["data"]} // one host's
	if hs, ok := tr.Outputs["hosts"].([]any); ok {
		datas = datas[:0]
		for _, h := range hs {
			datas = append(datas, h.(map[string]any)["data"])
		}
	}
	for _, d := range datas {
		d, _ := d.(map[string]any)
		r, _ := d["rest_rows"].(float64)
		restRows += r
		f := func(k string) float64 { v, _ := d[k].(float64); return v }
		t.Logf("the resumed gang's host: rows %.0f, rest_rows %.0f, read %.0f of %.0f bytes, disk peak %.0f", f("rows"), f("rest_rows"), f("bytes_read"), f("split_bytes"), f("disk_peak"))
	}

	// The rows the ranks logged, per epoch: epoch 0's, the first gang's
	// up to the checkpoint and the second's rest; the later epochs', the
	// second gang's.
	type sums struct{ count, sum, sumsq *big.Int }
	epochs := make([]sums, c.epochs)
	for i := range epochs {
		epochs[i] = sums{new(big.Int), new(big.Int), new(big.Int)}
	}
	seen := map[string]bool{}
	var first, second int64
	for _, h := range hosts {
		for _, m := range shardStepLine.FindAllStringSubmatch(h.output(), -1) {
			key := strings.Join(m[1:6], " ")
			if seen[key] {
				continue // a line can be logged twice (the stream and the tail)
			}
			seen[key] = true
			var world, epoch, step, n int64
			fmt.Sscan(m[1], &world)
			fmt.Sscan(m[3], &epoch)
			fmt.Sscan(m[5], &step)
			fmt.Sscan(m[6], &n)
			switch {
			case world == int64(firstWorld) && m[2] == "full" && epoch == 0 && step <= stored.Step:
				first += n
			case world == int64(firstWorld):
				continue // after the checkpoint: lost with the attempt
			case m[2] == "rest" && epoch == 0:
				second += n
			case m[2] == "full" && epoch > 0 && epoch < int64(c.epochs):
			default:
				t.Fatalf("the resumed gang trained other rows than the rest of epoch 0 and the later epochs: %s", m[0])
			}
			for i, acc := range []*big.Int{epochs[epoch].count, epochs[epoch].sum, epochs[epoch].sumsq} {
				v, ok := new(big.Int).SetString(m[6+i], 10)
				if !ok {
					t.Fatalf("line %q", m[0])
				}
				acc.Add(acc, v)
			}
		}
	}
	wantCount, wantSum, wantSq := new(big.Int), new(big.Int), new(big.Int)
	for i := range int64(c.rows) {
		id := big.NewInt(1<<32 | i)
		wantCount.Add(wantCount, big.NewInt(1))
		wantSum.Add(wantSum, id)
		wantSq.Add(wantSq, new(big.Int).Mul(id, id))
	}
	for i, got := range epochs {
		what := "the second gang"
		if i == 0 {
			what = fmt.Sprintf("%d ranks trained %d rows up to step %d, the resumed gang the rest, %d rows (rest_rows %.0f)", firstWorld, first, stored.Step, second, restRows)
		}
		t.Logf("coverage of epoch %d: %s: %s rows, id sum %s, sum of squares %s; the split: %s rows, %s, %s",
			i, what, got.count, got.sum, got.sumsq, wantCount, wantSum, wantSq)
		if got.count.Cmp(wantCount) != 0 || got.sum.Cmp(wantSum) != 0 || got.sumsq.Cmp(wantSq) != 0 {
			t.Errorf("the rows trained in epoch %d are not every row once", i)
		}
	}
	if float64(second) != restRows || first == 0 || second == 0 {
		t.Errorf("first gang %d rows, second %d, rest_rows %v: want both, and the rest all trained", first, second, restRows)
	}
}
