package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/activities/split/splittest"
	"github.com/retrain-ml/retrain/internal/devkit/s3fault"
	"github.com/retrain-ml/retrain/runs"
)

// streamRank is a command trainer rank in sh that takes its first step on
// its first Parquet file; streamed (RETRAIN_SHARD_STREAM=1), it then
// waits for the rest (.complete).
const streamRank = `
d=$RETRAIN_TRAIN_DATA
while ! ls "$d"/*.parquet >/dev/null 2>&1; do sleep 0.01; done
echo '{"step": 1, "loss": 0.5}'
if [ "$RETRAIN_SHARD_STREAM" = 1 ]; then
  while [ ! -f "$d/.complete" ]; do sleep 0.01; done
fi
n=$(ls "$d"/*.parquet | wc -l)
echo "stream-rank rank=$RANK files=$n"
echo '{"step": 2, "loss": 0.5}'
if [ "$RANK" = 0 ]; then echo weights > "$RETRAIN_MODEL_OUT/model.txt"; fi
`

// TestShardedGangStreams: a gang of 2 hosts × 2 ranks with shard_data in
// Parquet, its store 20 ms away per request, with stream_data and
// without: streamed, each host's first step comes on its first row
// groups, before its share is all local, and sooner than without.
func TestShardedGangStreams(t *testing.T) {
	parallelFor(t, 30*time.Second)
	if testing.Short() {
		t.Skip("builds retrain-worker and runs ranks in two worker processes")
	}
	e := newGangEnvOn(t, &torchEnv{retrainEnv: newRetrainEnv(t, true)})
	p, err := s3fault.Start(s3fault.Config{Target: e.srv.Endpoint, Delay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	e.s3 = e.net.forward(t, strings.TrimPrefix(p.URL(), "http://"))
	e.start(t, 0)
	e.start(t, 1)
	const rows, fileRows = 4000, 100 // a row group per file
	data := splittest.WriteFiles(t, e.store, "streamed", rows, 100, fileRows)
	spec := fmt.Sprintf(`name: streamed-gang
params:
  data: {type: string}
  stream: {type: bool}
nodes:
  - id: train
    type: train
    queue: %s
    heartbeat: 1m
    retry: {max_attempts: 1}
    with:
      trainer: command
      data: ${params.data}
      hosts: 2
      processes: 2
      shard_data: true
      stream_data: ${params.stream}
      argv: ["sh", "-c", %q]
`, e.queue, streamRank)
	first := map[bool][]float64{}
	for _, stream := range []bool{false, true} {
		res := runRequest(t, runs.Request{Spec: []byte(spec), SpecFile: "streamed.yaml", Params: map[string]any{"data": data, "stream": stream}, TaskQueue: e.torchEnv.queue}, 3*time.Minute)
		wantStatus(t, res, runs.StatusSucceeded)
		tr := node(t, res, "train")
		for _, h := range tr.Outputs["hosts"].([]any) {
			m := h.(map[string]any)
			d := m["data"].(map[string]any)
			t.Logf("stream_data %v, S3 20ms per request: host %v: first step %.2fs after it began reading, its share local after %.2fs; read %.0f of %.0f bytes in %.0f row groups, disk peak %.0f",
				stream, m["host"], d["first_step_seconds"], d["localize_seconds"], d["bytes_read"], d["split_bytes"], d["shards"], d["disk_peak"])
			first[stream] = append(first[stream], d["first_step_seconds"].(float64))
			if stream && d["first_step_seconds"].(float64) >= d["localize_seconds"].(float64) {
				t.Errorf("streamed, host %v's first step came at %.2fs, its share was local at %.2fs: want the step first", m["host"], d["first_step_seconds"], d["localize_seconds"])
			}
		}
	}
	for i := range first[true] {
		if first[true][i] >= first[false][i] {
			t.Errorf("host %d: first step %.2fs streamed, %.2fs not: want it sooner streamed", i, first[true][i], first[false][i])
		}
	}
}
