package integration

import (
	"bytes"
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
        print("shard-step world=%d phase=%s rank=%d step=%d count=%d sum=%d sumsq=%d" % (world, phase, rank, step, len(batch), sum(batch), sum(i * i for i in batch)), flush=True)
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

var shardStepLine = regexp.MustCompile(`shard-step world=(\d+) phase=(\w+) rank=(\d+) step=(\d+) count=(\d+) sum=(\d+) sumsq=(\d+)`)

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
	hosts := []*workerProc{e.start(t, 0), e.start(t, 1)}
	const rows, fileRows = 4000, 100
	data := splittest.WriteFiles(t, e.store, "sharded-kill", rows, 100, fileRows)
	out := t.TempDir()
	hold := filepath.Join(out, "hold")
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	spec := fmt.Sprintf(`name: sharded-kill
params:
  data: {type: string}
  processes: {type: int, default: 2}
nodes:
  - id: train
    type: train
    queue: %s
    heartbeat: 5s
    retry: {max_attempts: 1}
    with:
      trainer: command
      data: ${params.data}
      data_format: npy
      hosts: 2
      processes: ${params.processes}
      shard_data: true
      env: {OUT: %q}
      argv: ["python3", "-c", %q]
`, e.queue, out, shardStepper)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	req := runs.Request{Spec: []byte(spec), SpecFile: "sharded-kill.yaml", Params: map[string]any{"data": data}, TaskQueue: e.torchEnv.queue}
	run, err := runs.Start(ctx, tclient, req)
	if err != nil {
		t.Fatal(err)
	}
	// The checkpoint of step 30, with the ranks' place in their shares.
	var stored struct {
		Step   int64           `json:"checkpoint_step"`
		Shards json.RawMessage `json:"shards"`
	}
	for deadline := time.Now().Add(2 * time.Minute); stored.Step < 30; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint at step 30 within 2 minutes; host outputs:\n%s\n%s", hosts[0].output(), hosts[1].output())
		}
		for o, err := range e.store.List(ctx, "checkpoints/sharded-kill/"+run.ID+"/train/") {
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
	t.Logf("the gang of 4 ranks failed: %s", res.Error)

	// Again under its id, 1 rank a host, host h1 back.
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	hosts = append(hosts, e.start(t, 1))
	req.ID, req.Params = run.ID, map[string]any{"data": data, "processes": 1}
	res = runRequest(t, req, 3*time.Minute)
	wantStatus(t, res, runs.StatusSucceeded)
	tr := node(t, res, "train")
	t.Logf("the gang of 2 ranks: resumed_from %v; %s", tr.Outputs["resumed_from"], tr.Outputs["summary"])
	if rf, _ := tr.Outputs["resumed_from"].(float64); int64(rf) != stored.Step {
		t.Fatalf("resumed_from %v, want the checkpoint of step %d", tr.Outputs["resumed_from"], stored.Step)
	}
	var restRows float64
	for _, h := range tr.Outputs["hosts"].([]any) {
		d, _ := h.(map[string]any)["data"].(map[string]any)
		r, _ := d["rest_rows"].(float64)
		restRows += r
	}

	// The rows the ranks logged: the first gang's up to the checkpoint
	// (what came after it is lost with the attempt), the second's all.
	count, sum, sumsq := new(big.Int), new(big.Int), new(big.Int)
	seen := map[string]bool{}
	var first, second int64
	for _, h := range hosts {
		for _, m := range shardStepLine.FindAllStringSubmatch(h.output(), -1) {
			key := strings.Join(m[1:5], " ")
			if seen[key] {
				continue // a line can be logged twice (the stream and the tail)
			}
			seen[key] = true
			var step, n int64
			fmt.Sscan(m[4], &step)
			fmt.Sscan(m[5], &n)
			switch {
			case m[1] == "4" && m[2] == "full" && step <= stored.Step:
				first += n
			case m[1] == "2" && m[2] == "rest":
				second += n
			case m[1] == "2":
				t.Fatalf("the resumed gang trained its full share, not the rest: %s", m[0])
			default:
				continue
			}
			for i, acc := range []*big.Int{count, sum, sumsq} {
				v, ok := new(big.Int).SetString(m[5+i], 10)
				if !ok {
					t.Fatalf("line %q", m[0])
				}
				acc.Add(acc, v)
			}
		}
	}
	wantCount, wantSum, wantSq := new(big.Int), new(big.Int), new(big.Int)
	for i := range int64(rows) {
		id := big.NewInt(1<<32 | i)
		wantCount.Add(wantCount, big.NewInt(1))
		wantSum.Add(wantSum, id)
		wantSq.Add(wantSq, new(big.Int).Mul(id, id))
	}
	t.Logf("coverage of the interrupted epoch: 4 ranks trained %d rows up to step %d, 2 ranks the rest, %d rows (rest_rows %v): %s rows, id sum %s, sum of squares %s; the split: %s rows, %s, %s",
		first, stored.Step, second, restRows, count, sum, sumsq, wantCount, wantSum, wantSq)
	if count.Cmp(wantCount) != 0 || sum.Cmp(wantSum) != 0 || sumsq.Cmp(wantSq) != 0 {
		t.Fatal("the rows trained in the epoch are not every row once")
	}
	if float64(second) != restRows || first == 0 || second == 0 {
		t.Errorf("first gang %d rows, second %d, rest_rows %v: want both, and the rest all trained", first, second, restRows)
	}
}
