package train

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/activities/split/splittest"
	"github.com/retrain-ml/retrain/internal/devkit/s3fault"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/nodetype"
)

// streamScript is a command trainer rank in sh that starts on its first
// Parquet file: it notes how many of its files were there then (and
// whether .complete was), prints its first step, waits for .complete and
// keeps a copy of its share.
const streamScript = `
set -e
r=${RANK:-0}
d=$RETRAIN_TRAIN_DATA
while ! ls "$d"/*.parquet >/dev/null 2>&1; do sleep 0.01; done
n=$(ls "$d"/*.parquet | wc -l)
c=0; if [ -f "$d/.complete" ]; then c=1; fi
echo "$n $c $RETRAIN_SHARD_FILES" > "$OUT/first-$r"
echo '{"step": 1, "loss": 0.5}'
while [ ! -f "$d/.complete" ]; do sleep 0.01; done
cp -r "$d" "$OUT/share-$r"
echo '{"step": 2, "loss": 0.5}'
if [ "$r" = 0 ]; then echo weights > "$RETRAIN_MODEL_OUT/model.txt"; fi
`

// TestStreamData: with stream_data, on a store 50 ms away per request,
// each of 2 ranks takes its first step on its first row group, while its
// last is still to come, and ends with its whole share (with the other's,
// every row once); the node's first step comes before the data is all
// local. A split file that cannot be read fails the attempt naming it.
func TestStreamData(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	t.Setenv("TMPDIR", t.TempDir())
	const rows = 2000
	data := splittest.WriteFiles(t, st, "st", rows, 50, 100) // 20 files of a row group
	p, err := s3fault.Start(s3fault.Config{Target: srv.Endpoint, Delay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	cfg := srv.Config("")
	cfg.Endpoint = p.URL()
	slow, err := s3store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	tr := &Trainers{Store: slow, Logger: quiet}
	in := func(run string) nodetype.Input {
		return nodetype.Input{Pipeline: "test", RunID: run, Node: "train", Type: "train", With: map[string]any{
			"trainer": "command", "data": data, "argv": []any{"sh", "-c", streamScript},
			"processes": 2, "shard_data": true, "stream_data": true, "env": map[string]any{"OUT": out},
		}}
	}
	res, err := nodetest.Run(t, tr.Run, in("stream"), nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]int{}
	for r := range 2 {
		first, _ := os.ReadFile(filepath.Join(out, "first-"+strconv.Itoa(r)))
		f := strings.Fields(string(first))
		if len(f) != 3 {
			t.Fatalf("rank %d noted %q", r, first)
		}
		t.Logf("rank %d took its first step with %s of its %s files local (.complete: %s)", r, f[0], f[2], f[1])
		if n, _ := strconv.Atoi(f[0]); f[1] != "0" || strconv.Itoa(n) == f[2] {
			t.Errorf("rank %d started with %s of %s files, .complete %s: want it to start before its last file", r, f[0], f[2], f[1])
		}
		ids := requestIDs(t, filepath.Join(out, "share-"+strconv.Itoa(r)))
		for _, id := range ids {
			seen[id]++
		}
	}
	for i := range int64(rows) {
		if seen[1<<32|i] != 1 {
			t.Fatalf("row %d given %d times", i, seen[1<<32|i])
		}
	}
	d := res["data"].(map[string]any)
	t.Logf("first step %.2fs after the host began reading; the data took %.2fs", d["first_step_seconds"], d["localize_seconds"])
	if d["first_step_seconds"].(float64) >= d["localize_seconds"].(float64) {
		t.Errorf("first step %v s, the data %v s: want the step first", d["first_step_seconds"], d["localize_seconds"])
	}

	// A file of the split gone: the attempt fails naming it.
	sd, err := split.Open(context.Background(), st, data)
	if err != nil {
		t.Fatal(err)
	}
	ds, _ := sd.Manifest.Dataset(split.TrainDataset)
	key := ds.Files[len(ds.Files)-1].Key
	if err := st.Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if _, err := nodetest.Run(t, tr.Run, in("stream-missing"), nil); err == nil || !strings.Contains(err.Error(), key) {
		t.Fatalf("a missing file: %v, want it named (%s)", err, key)
	}
}

// TestStreamDataNeedsShards: stream_data without shard_data, and a stream_window that is not a number of files or has no stream, are
// refused before anything runs.
func TestStreamDataNeedsShards(t *testing.T) {
	for with, want := range map[string]map[string]any{
		"needs shard_data":         {"trainer": "command", "data": "s3://b/s/", "argv": []any{"true"}, "stream_data": true},
		"stream_window -1":         {"trainer": "command", "data": "s3://b/s/", "argv": []any{"true"}, "stream_data": true, "shard_data": true, "stream_window": -1.0},
		"give it with stream_data": {"trainer": "command", "data": "s3://b/s/", "argv": []any{"true"}, "shard_data": true, "stream_window": 2.0},
	} {
		if err := checkTrain(want); err == nil || !strings.Contains(err.Error(), with) {
			t.Errorf("%v: %v, want it to say %q", want, err, with)
		}
	}
}

// windowScript is a command trainer rank in sh that reads its streamed
// pieces (names matching $PAT) one at a time in name order and removes
// each once read (moved to $OUT/share-RANK), noting the most its folder
// held at once.
const windowScript = `
set -e
r=${RANK:-0}
d=$RETRAIN_TRAIN_DATA
mkdir -p "$OUT/share-$r"
most=0; got=0
while [ "$got" -lt "$RETRAIN_SHARD_FILES" ]; do
  f=$(ls "$d" | grep "$PAT" | head -n 1 || true)
  if [ -z "$f" ]; then sleep 0.01; continue; fi
  n=$(ls "$d" | grep -c "$PAT" || true)
  if [ "$n" -gt "$most" ]; then most=$n; fi
  sleep 0.02
  mv "$d/$f" "$OUT/share-$r/$f"
  got=$((got+1))
  echo "{\"step\": $got, \"loss\": 0.5}"
done
echo "$most ${RETRAIN_SHARD_WINDOW:-0}" > "$OUT/most-$r"
if [ "$r" = 0 ]; then echo weights > "$RETRAIN_MODEL_OUT/model.txt"; fi
`

// TestStreamWindow: with stream_window 2 the host writes a rank's next
// piece only once its trainer has removed one: each rank's folder never
// holds more than 2, the host's disk peak is a fraction of the unbounded
// stream's, and the ranks still read every row once; in Parquet files,
// and in npy folders (one a piece).
func TestStreamWindow(t *testing.T) {
	for _, format := range []string{split.FormatParquet, split.FormatNPY} {
		t.Run(format, func(t *testing.T) { streamWindow(t, format) })
	}
}

func streamWindow(t *testing.T, format string) {
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	t.Setenv("TMPDIR", t.TempDir())
	const rows = 2000
	data := splittest.WriteFiles(t, st, "sw", rows, 50, 100) // 20 files of a row group
	tr := &Trainers{Store: st, Logger: quiet}
	peaks, read := map[int]float64{}, 0.0
	for _, window := range []int{0, 2} {
		out := t.TempDir()
		pat := `^part-.*\.parquet$`
		if format == split.FormatNPY {
			pat = `^part-[0-9]*-u[0-9-]*$`
		}
		in := nodetype.Input{Pipeline: "test", RunID: "sw-" + format + strconv.Itoa(window), Node: "train", Type: "train", With: map[string]any{
			"trainer": "command", "data": data, "data_format": format, "argv": []any{"sh", "-c", windowScript},
			"processes": 2, "shard_data": true, "stream_data": true, "stream_window": window, "env": map[string]any{"OUT": out, "PAT": pat},
		}}
		res, err := nodetest.Run(t, tr.Run, in, nil)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int64]int{}
		for r := range 2 {
			b, _ := os.ReadFile(filepath.Join(out, "most-"+strconv.Itoa(r)))
			f := strings.Fields(string(b))
			if len(f) != 2 || f[1] != strconv.Itoa(window) {
				t.Fatalf("window %d: rank %d noted %q", window, r, b)
			}
			most, _ := strconv.Atoi(f[0])
			t.Logf("stream_window %d: rank %d's folder held at most %d files", window, r, most)
			if window > 0 && most > window {
				t.Errorf("stream_window %d: rank %d's folder held %d files", window, r, most)
			}
			dirs := []string{filepath.Join(out, "share-"+strconv.Itoa(r))}
			if format == split.FormatNPY {
				dirs, _ = filepath.Glob(filepath.Join(dirs[0], "part-*"))
			}
			for _, dir := range dirs {
				for _, id := range requestIDs(t, dir) {
					seen[id]++
				}
			}
		}
		for i := range int64(rows) {
			if seen[1<<32|i] != 1 {
				t.Fatalf("stream_window %d: row %d read %d times", window, i, seen[1<<32|i])
			}
		}
		d := res["data"].(map[string]any)
		peaks[window], read = d["disk_peak"].(float64), d["bytes_read"].(float64)
		t.Logf("stream_window %d: disk peak %.0f bytes, read %.0f of %.0f", window, d["disk_peak"], d["bytes_read"], d["split_bytes"])
	}
	// 2 ranks × at most 2 of their 10 files (and one being written): about
	// 0.3 of the bytes read; unbounded, the disk holds what the ranks have
	// not read yet, up to all of it.
	if peaks[2] <= 0 || peaks[2] > read/2 {
		t.Errorf("disk peak %.0f with a window of 2 files a rank (%.0f without), %.0f bytes read: want at most half", peaks[2], peaks[0], read)
	}
}
