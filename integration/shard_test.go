package integration

import (
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/activities/split/splittest"
	"github.com/retrain-ml/retrain/internal/devkit/s3fault"
	"github.com/retrain-ml/retrain/runs"
)

// shardRank is a command trainer rank in Python's standard library alone:
// it reads the request ids of its share (request_id.npy of
// RETRAIN_TRAIN_DATA) and logs their count, sum and sum of squares, which
// the test adds up over the ranks of both hosts.
const shardRank = `
import array, json, os, struct
d = os.environ["RETRAIN_TRAIN_DATA"]
b = open(os.path.join(d, "request_id.npy"), "rb").read()
ids = array.array("q")
ids.frombytes(b[10 + struct.unpack("<H", b[8:10])[0]:])
rank = os.environ.get("RANK", "0")
print("shard-rows rank=%s index=%s count=%d sum=%d sumsq=%d" % (rank, os.environ.get("RETRAIN_SHARD_INDEX", "-"), len(ids), sum(ids), sum(i * i for i in ids)), flush=True)
print(json.dumps({"step": 1, "loss": 0.5}), flush=True)
if rank == "0":
    open(os.path.join(os.environ["RETRAIN_MODEL_OUT"], "model.txt"), "w").write("weights")
`

var shardRowsLine = regexp.MustCompile(`shard-rows rank=(\d+) index=(\d+) count=(\d+) sum=(\d+) sumsq=(\d+)`)

// TestShardedGangReadsItsShare: a train node with hosts: 2, processes: 2
// and shard_data on two namespaced hosts: each host reads at most 0.55 of
// the split's training data, and the rows the four ranks logged are every
// row of the split once (count, sum and sum of squares of the request ids).
func TestShardedGangReadsItsShare(t *testing.T) {
	parallelFor(t, 20*time.Second)
	shardedGang(t, 0)
}

// TestShardedGangOnSlowS3 is TestShardedGangReadsItsShare with the hosts'
// object store 20 ms away per request (an s3fault proxy).
func TestShardedGangOnSlowS3(t *testing.T) {
	parallelFor(t, 20*time.Second)
	shardedGang(t, 20*time.Millisecond)
}

func shardedGang(t *testing.T, delay time.Duration) {
	if testing.Short() {
		t.Skip("builds retrain-worker and runs ranks in two worker processes")
	}
	e := newGangEnvOn(t, &torchEnv{retrainEnv: newRetrainEnv(t, true)})
	if delay > 0 {
		p, err := s3fault.Start(s3fault.Config{Target: e.srv.Endpoint, Delay: delay})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		e.s3 = e.net.forward(t, strings.TrimPrefix(p.URL(), "http://"))
	}
	hosts := []*workerProc{e.start(t, 0), e.start(t, 1)}
	const rows, fileRows = 4000, 100 // a row group per file
	data := splittest.WriteFiles(t, e.store, "sharded", rows, 100, fileRows)
	spec := fmt.Sprintf(`name: sharded-gang
params:
  data: {type: string}
  shard: {type: bool, default: true}
nodes:
  - id: train
    type: train
    queue: %s
    heartbeat: 1m
    retry: {max_attempts: 1}
    with:
      trainer: command
      data: ${params.data}
      data_format: npy
      hosts: 2
      processes: 2
      shard_data: ${params.shard}
      argv: ["python3", "-c", %q]
`, e.queue, shardRank)
	// Per host: the bytes it read against the split's training data,
	// sharded and (for comparison) not.
	perHost := func(shard bool) []map[string]any {
		res := runRequest(t, runs.Request{Spec: []byte(spec), SpecFile: "sharded.yaml", Params: map[string]any{"data": data, "shard": shard}, TaskQueue: e.torchEnv.queue}, 3*time.Minute)
		wantStatus(t, res, runs.StatusSucceeded)
		tr := node(t, res, "train")
		t.Logf("shard_data %v, S3 %v per request: train: %s", shard, delay, tr.Outputs["summary"])
		gotHosts, _ := tr.Outputs["hosts"].([]any)
		if len(gotHosts) != 2 {
			t.Fatalf("hosts %v: want 2", tr.Outputs["hosts"])
		}
		var out []map[string]any
		for _, h := range gotHosts {
			m := h.(map[string]any)
			d, _ := m["data"].(map[string]any)
			if d == nil {
				t.Fatalf("host %v reports no data read", m["host"])
			}
			t.Logf("shard_data %v: host %v (ranks %v): read %.0f of %.0f bytes (%.3f) in %.0f units, %.0f rows, local disk peak %.0f bytes, first step %.2fs after it began reading",
				shard, m["host"], d["ranks"], d["bytes_read"], d["split_bytes"], d["bytes_read"].(float64)/d["split_bytes"].(float64), d["shards"], d["rows"], d["disk_peak"], d["first_step_seconds"])
			out = append(out, d)
		}
		return out
	}
	for i, d := range perHost(true) {
		if share := d["bytes_read"].(float64) / d["split_bytes"].(float64); share > 0.55 {
			t.Errorf("host %d read %.3f of the split: want at most 0.55", i, share)
		}
	}
	for i, d := range perHost(false) {
		if d["bytes_read"] != d["split_bytes"] || d["rows"] != float64(rows) {
			t.Errorf("host %d without shard_data: %v: want the whole split", i, d)
		}
	}

	// The rows the ranks logged: every request id 1<<32|i, i < rows, once.
	count, sum, sumsq := new(big.Int), new(big.Int), new(big.Int)
	seen := map[string]bool{}
	for _, h := range hosts {
		for _, m := range shardRowsLine.FindAllStringSubmatch(h.output(), -1) {
			if m[1] != m[2] {
				t.Errorf("rank %s holds share %s", m[1], m[2])
			}
			if seen[m[1]] {
				continue // a line can be logged twice (the stream and the tail)
			}
			seen[m[1]] = true
			for i, acc := range []*big.Int{count, sum, sumsq} {
				v, ok := new(big.Int).SetString(m[3+i], 10)
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
	t.Logf("ranks logged %d shares: %s rows, id sum %s, sum of squares %s; the split: %s rows, %s, %s", len(seen), count, sum, sumsq, wantCount, wantSum, wantSq)
	if len(seen) != 4 || count.Cmp(wantCount) != 0 || sum.Cmp(wantSum) != 0 || sumsq.Cmp(wantSq) != 0 {
		t.Fatalf("the ranks' rows are not every row once: ranks %v", seen)
	}
}

// TestTorchShardedAcrossHosts: torch-retrain's train.py on two namespaced
// hosts with shard_data (each host reading its half of the split) reaches
// the AUC of one host reading the whole split, within 0.002.
func TestTorchShardedAcrossHosts(t *testing.T) {
	parallelTorch(t, 55*time.Second)
	e := newGangEnv(t)
	e.start(t, 0)
	e.start(t, 1)
	spec := exampleSpec(t, "torch-retrain", "    heartbeat: 1m\n", "    heartbeat: 1m\n    queue: "+e.queue+"\n")
	run := func(model string, hosts int, shard bool) (float64, map[string]any) {
		res := runRequest(t, runs.Request{Spec: spec, SpecFile: "torch-retrain.yaml", TaskQueue: e.torchEnv.queue,
			Params: e.params(map[string]any{"hosts": hosts, "processes": 1, "model": model, "shard_data": shard})}, 5*time.Minute)
		wantStatus(t, res, runs.StatusSucceeded)
		return node(t, res, "evaluate").Outputs["auc"].(float64), node(t, res, "train").Outputs
	}
	auc1, one := run("ctr_whole", 1, false)
	auc2, two := run("ctr_sharded", 2, true)
	t.Logf("one host, whole split: AUC %.5f, %s", auc1, one["summary"])
	t.Logf("two hosts, shard_data: AUC %.5f (%+.5f), %s", auc2, auc2-auc1, two["summary"])
	hosts, _ := two["hosts"].([]any)
	if len(hosts) != 2 {
		t.Fatalf("hosts %v: want 2", two["hosts"])
	}
	for _, h := range hosts {
		m := h.(map[string]any)
		d := m["data"].(map[string]any)
		share := d["bytes_read"].(float64) / d["split_bytes"].(float64)
		t.Logf("host %v: read %.0f of %.0f bytes (%.3f) in %.0f units, %.0f rows, disk peak %.0f, first step %.2fs after it began reading",
			m["host"], d["bytes_read"], d["split_bytes"], share, d["shards"], d["rows"], d["disk_peak"], d["first_step_seconds"])
		if share > 0.55 {
			t.Errorf("host %v read %.3f of the split: want at most 0.55", m["host"], share)
		}
	}
	if d := one["data"].(map[string]any); d["bytes_read"] != d["split_bytes"] {
		t.Errorf("one host read %v", d)
	} else {
		t.Logf("one host: read %.0f bytes, disk peak %.0f, first step %.2fs after it began reading", d["bytes_read"], d["disk_peak"], d["first_step_seconds"])
	}
	if math.Abs(auc1-auc2) > 0.002 {
		t.Errorf("AUC sharded on 2 hosts %.5f, whole on 1 host %.5f: want within 0.002", auc2, auc1)
	}
}
