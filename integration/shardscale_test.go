package integration

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/devkit/s3fault"
	"github.com/retrain-ml/retrain/runs"
)

// TestTorchShardedAtScale measures what shard_data saves a torch-retrain
// gang at a size where the bytes matter: the demo data at
// RETRAIN_SHARD_SCALE_ROWS rows over RETRAIN_SHARD_SCALE_DAYS days, the
// two namespaced hosts' object store RETRAIN_SHARD_SCALE_DELAY_MS away
// per request (an s3fault proxy; default 20). It trains one host on the
// whole split, then two hosts each on the whole split (what a gang did
// before shard_data), then two hosts with shard_data, then the same
// streamed (stream_data, a window of 4 pieces a rank), and logs per host
// the bytes read against the split's, the time to the first step and the
// local disk peak, and each run's AUC. It runs only when asked:
//
//	RETRAIN_SHARD_SCALE_ROWS=2000000 RETRAIN_SHARD_SCALE_DAYS=10 \
//	  go test ./integration/ -run TestTorchShardedAtScale -count=1 -v -timeout 60m
//
// It checks what the figures must say: each sharded host read at most
// 0.55 of the split, and the sharded gangs' AUC is the one host's within
// 0.002.
func TestTorchShardedAtScale(t *testing.T) {
	rows := scaleEnv("RETRAIN_SHARD_SCALE_ROWS", 0)
	if rows == 0 {
		t.Skip("set RETRAIN_SHARD_SCALE_ROWS (e.g. 2000000) to measure sharded torch training on two hosts")
	}
	days := int(scaleEnv("RETRAIN_SHARD_SCALE_DAYS", 10))
	delay := time.Duration(scaleEnv("RETRAIN_SHARD_SCALE_DELAY_MS", 20)) * time.Millisecond
	start, _ := backfill.ParseDay(retrainStart)
	end := start.Time().AddDate(0, 0, days-1).Format(time.DateOnly)

	began := time.Now()
	te := newTorchEnv(t, true)
	te.data = demodata.Config{Rows: rows, Days: days, Seed: 1}
	te.writeData(t, demodata.Broken{})
	t.Logf("demo data: %d rows over %d days (%s..%s) written in %v", rows, days, retrainStart, end, time.Since(began).Round(time.Second))
	e := newGangEnvOn(t, te)
	p, err := s3fault.Start(s3fault.Config{Target: e.srv.Endpoint, Delay: delay})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	e.s3 = e.net.forward(t, strings.TrimPrefix(p.URL(), "http://"))
	e.start(t, 0)
	e.start(t, 1)

	// torch-retrain with the streaming knobs as params (its train.py reads
	// a streamed npy share as it comes).
	spec := exampleSpec(t, "torch-retrain", "    heartbeat: 1m\n", "    heartbeat: 1m\n    queue: "+e.queue+"\n",
		"      shard_data: ${params.shard_data}\n", "      shard_data: ${params.shard_data}\n      stream_data: ${params.stream_data}\n      stream_window: ${params.stream_window}\n",
		"  shard_data: {type: bool", "  stream_data: {type: bool, default: false}\n  stream_window: {type: int, default: 0}\n  shard_data: {type: bool")
	run := func(model string, hosts int, shard bool, window int) float64 {
		params := e.params(map[string]any{"hosts": hosts, "processes": 1, "model": model, "shard_data": shard,
			"stream_data": window > 0, "stream_window": window})
		params["end_date"] = end
		res := runRequest(t, runs.Request{Spec: spec, SpecFile: "torch-retrain.yaml", TaskQueue: e.torchEnv.queue, Params: params}, 50*time.Minute)
		wantStatus(t, res, runs.StatusSucceeded)
		tr := node(t, res, "train")
		auc := node(t, res, "evaluate").Outputs["auc"].(float64)
		t.Logf("%s: hosts %d, shard_data %v, stream_window %d: AUC %.5f; train node %v: %s", model, hosts, shard, window, auc,
			tr.EndedAt.Sub(*tr.StartedAt).Round(100*time.Millisecond), tr.Outputs["summary"])
		for _, d := range hostData(t, tr.Outputs) {
			share := d["bytes_read"].(float64) / d["split_bytes"].(float64)
			t.Logf("  host %v: read %s of %s (%.3f) in %.0f units, %.0f rows, local disk peak %s, first step %.2fs after it began reading",
				d["host"], fmtBytes(d["bytes_read"]), fmtBytes(d["split_bytes"]), share, d["shards"], d["rows"], fmtBytes(d["disk_peak"]), d["first_step_seconds"])
			if shard && share > 0.55 {
				t.Errorf("host %v read %.3f of the split: want at most 0.55", d["host"], share)
			}
		}
		return auc
	}
	whole := run("ctr_scale_one", 1, false, 0)
	run("ctr_scale_two_whole", 2, false, 0)
	sharded := run("ctr_scale_two_sharded", 2, true, 0)
	streamed := run("ctr_scale_two_streamed", 2, true, 4)
	t.Logf("AUC: one host %.5f, two sharded hosts %.5f (%+.5f), two sharded hosts streamed through a window of 4 %.5f (%+.5f)",
		whole, sharded, sharded-whole, streamed, streamed-whole)
	for what, auc := range map[string]float64{"sharded": sharded, "sharded and streamed": streamed} {
		if math.Abs(whole-auc) > 0.002 {
			t.Errorf("AUC %s on 2 hosts %.5f, whole on 1 host %.5f: want within 0.002", what, auc, whole)
		}
	}
}

// hostData is each host's data figures from a train node's outputs, with
// the host's name under "host".
func hostData(t *testing.T, outputs map[string]any) []map[string]any {
	t.Helper()
	var out []map[string]any
	if hosts, ok := outputs["hosts"].([]any); ok {
		for _, h := range hosts {
			m := h.(map[string]any)
			d, _ := m["data"].(map[string]any)
			if d == nil {
				t.Fatalf("host %v reports no data read", m["host"])
			}
			d["host"] = m["host"]
			out = append(out, d)
		}
		return out
	}
	d, _ := outputs["data"].(map[string]any)
	if d == nil {
		t.Fatalf("train outputs %v: no data figures", outputs)
	}
	d["host"] = "h0"
	return []map[string]any{d}
}

// fmtBytes writes a JSON number of bytes in MB.
func fmtBytes(v any) string {
	f, _ := v.(float64)
	return fmt.Sprintf("%.1f MB", f/1e6)
}
