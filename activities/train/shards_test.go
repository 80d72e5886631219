package train

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/activities/internal/objects"
	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/activities/split/splittest"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/npy"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/nodetype"
)

// shardScript is a command trainer rank in sh that keeps what it was
// given: its share's environment and a copy of its RETRAIN_TRAIN_DATA, in
// the model folder (every rank of the test runs on one worker).
const shardScript = `
set -e
r=${RANK:-0}
env | grep -E '^RETRAIN_(TRAIN_DATA|EVAL_DATA|SHARD_|GLOBAL_)' | sort > "$RETRAIN_MODEL_OUT/env-$r.txt"
cp -r "$RETRAIN_TRAIN_DATA" "$RETRAIN_MODEL_OUT/share-$r"
echo '{"step": 1, "loss": 0.5}'
if [ "$r" = 0 ]; then echo weights > "$RETRAIN_MODEL_OUT/model.txt"; fi
`

// requestIDs reads the request ids of a rank's share folder: its Parquet
// files, or request_id.npy.
func requestIDs(t *testing.T, dir string) []int64 {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(dir, "request_id.npy")); err == nil {
		ids, _, err := npy.Read[int64](strings.NewReader(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.parquet"))
	var ids []int64
	for _, name := range files {
		rows, err := parquet.ReadFile[struct {
			RequestID int64 `parquet:"request_id"`
		}](name)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			ids = append(ids, r.RequestID)
		}
	}
	return ids
}

// TestShardDataGivesEachRankItsShare: with shard_data, three ranks get
// disjoint shares whose union is every training row once, in Parquet and
// in npy, with the env naming each share.
func TestShardDataGivesEachRankItsShare(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	const rows = 1000
	data := splittest.WriteFiles(t, st, "s1", rows, 50, 90) // 12 files, the last short
	ctx := context.Background()
	for _, format := range []string{"parquet", "npy"} {
		t.Run(format, func(t *testing.T) {
			tr := &Trainers{Store: st, Logger: quiet}
			in := nodetype.Input{Pipeline: "test", RunID: "s1" + format, Node: "train", Type: "train", With: map[string]any{
				"trainer": "command", "data": data, "argv": []any{"sh", "-c", shardScript},
				"processes": 3, "shard_data": true, "data_format": format,
			}}
			out, err := nodetest.Run(t, tr.Run, in, nil)
			if err != nil {
				t.Fatal(err)
			}
			key, _ := objects.StoreKey(st, out["model_uri"].(string))
			dir := t.TempDir()
			if _, err := objects.DownloadPrefix(ctx, st, key, dir); err != nil {
				t.Fatal(err)
			}
			seen := map[int64]int{}
			var sizes []int
			for r := range 3 {
				ids := requestIDs(t, filepath.Join(dir, "share-"+strconv.Itoa(r)))
				sizes = append(sizes, len(ids))
				for _, id := range ids {
					seen[id]++
				}
				env, _ := os.ReadFile(filepath.Join(dir, "env-"+strconv.Itoa(r)+".txt"))
				for _, want := range []string{"RETRAIN_SHARD_INDEX=" + strconv.Itoa(r), "RETRAIN_SHARD_COUNT=3", "RETRAIN_GLOBAL_ROWS=1000",
					"RETRAIN_SHARD_ROWS=" + strconv.Itoa(len(ids)), "RETRAIN_SHARD_EPOCH=0", "RETRAIN_SHARD_MIN_ROWS="} {
					if !strings.Contains(string(env), want) {
						t.Errorf("rank %d's env lacks %s:\n%s", r, want, env)
					}
				}
			}
			for i := range int64(rows) {
				if seen[1<<32|i] != 1 {
					t.Fatalf("row %d given %d times (shares %v)", i, seen[1<<32|i], sizes)
				}
			}
			if len(seen) != rows {
				t.Fatalf("%d distinct rows, want %d", len(seen), rows)
			}
			// Whole files of 90 rows: each within one file of the even
			// share.
			if float64(slices.Max(sizes))-rows/3.0 > 91 || rows/3.0-float64(slices.Min(sizes)) > 91 {
				t.Errorf("shares %v: want within one file of %d", sizes, rows/3)
			}
			d, _ := out["data"].(map[string]any)
			// One worker holds every rank: it reads every row group (one
			// per file here) and each file's footer, no more than the files.
			if d == nil || d["shards"].(float64) != 12 || d["rows"].(float64) != rows || d["bytes_read"].(float64) > d["split_bytes"].(float64) ||
				d["bytes_read"].(float64) < 0.9*d["split_bytes"].(float64) || d["disk_peak"].(float64) <= 0 {
				t.Errorf("outputs data %v: want the 12 row groups, the split read once on one worker", out["data"])
			}
			t.Logf("%s: shares %v, data %v", format, sizes, d)
		})
	}
}

// TestShardHostReadsItsShareOnly: host 1 of 2 (ranks 2 and 3 of 4) reads
// about half the split; a file it cannot read fails naming the file, and
// the retry reads only what is missing.
func TestShardHostReadsItsShareOnly(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	data := splittest.WriteFiles(t, st, "s2", 2000, 10, 100) // 20 files
	ctx := context.Background()
	sd, err := split.Open(ctx, st, data)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", t.TempDir())
	t.Run("row groups", func(t *testing.T) { hostReadsItsShare(t, st, sd, "h1") })
	// A split written before manifests recorded row groups: whole files.
	old := *sd
	old.Manifest.Datasets = slices.Clone(sd.Manifest.Datasets)
	for i := range old.Manifest.Datasets {
		files := slices.Clone(old.Manifest.Datasets[i].Files)
		for k := range files {
			files[k].RowGroups = nil
		}
		old.Manifest.Datasets[i].Files = files
	}
	t.Run("files", func(t *testing.T) { hostReadsItsShare(t, st, &old, "h1-old") })
}

// hostReadsItsShare: host 1 of 2 (ranks 2 and 3 of 4) of sd reads about
// half of it; a file it cannot read fails naming the file, and the retry
// reads only what is missing.
func hostReadsItsShare(t *testing.T, st *s3store.Store, sd *split.Data, node string) {
	ctx := context.Background()
	plan, err := planShards(sd, 4, []int{2, 3}, node, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The file the host needs last goes missing.
	ds, _ := sd.Manifest.Dataset(split.TrainDataset)
	var need []int
	for _, r := range []int{2, 3} {
		need = append(need, plan.ranks[r].share.Units()...)
	}
	missing := ds.Files[plan.units[need[len(need)-1]].file]
	body, _, err := st.GetBytes(ctx, missing.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, missing.Key); err != nil {
		t.Fatal(err)
	}
	first, err := plan.localize(ctx, st, sd.Record.Schema, "parquet")
	if err == nil || !strings.Contains(err.Error(), missing.Key) {
		t.Fatalf("a missing file: error %v, want it named (%s)", err, missing.Key)
	}
	t.Logf("missing file: %v", err)
	if _, err := st.PutBytes(ctx, missing.Key, body); err != nil {
		t.Fatal(err)
	}
	again, err := plan.localize(ctx, st, sd.Record.Schema, "parquet")
	if err != nil {
		t.Fatal(err)
	}
	if again.Shards != 1 || again.BytesRead > missing.Size || again.Reused != len(need)-1 {
		t.Errorf("retry read %d units, %d bytes, reused %d pieces: want only the missing file's (%d bytes), the other %d reused", again.Shards, again.BytesRead, again.Reused, missing.Size, len(need)-1)
	}
	total := first.BytesRead + again.BytesRead
	share := float64(total) / float64(again.SplitBytes)
	t.Logf("%s: host 1 of 2 read %d of the split's %d bytes (%.3f) in %d units; %d rows; disk peak %d", node, total, again.SplitBytes, share, len(need), again.Rows, again.DiskPeak)
	if share > 0.55 || again.Rows != 1000 {
		t.Errorf("host 1 of 2 read %.3f of the split for %d rows: want at most 0.55, 1000 rows", share, again.Rows)
	}
	if again.DiskPeak > again.SplitBytes {
		t.Errorf("disk peak %d above the split's %d bytes", again.DiskPeak, again.SplitBytes)
	}
}

// TestShardRowGroupsOfOneFile: a split of one file of many row groups
// still gives each host about its share's bytes: it fetches its row
// groups and the footer, not the file.
func TestShardRowGroupsOfOneFile(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	t.Setenv("TMPDIR", t.TempDir())
	ctx := context.Background()
	data := splittest.WriteOptions(t, st, "s4", 80_000, 10, checkpoint.Options{RowGroupBytes: 4 << 10}) // a group per 4096 rows written
	sd, err := split.Open(ctx, st, data)
	if err != nil {
		t.Fatal(err)
	}
	ds, _ := sd.Manifest.Dataset(split.TrainDataset)
	if len(ds.Files) != 1 || len(ds.Files[0].RowGroups) < 16 {
		t.Fatalf("%d files, %d row groups: want one file of many", len(ds.Files), len(ds.Files[0].RowGroups))
	}
	seen := map[int64]int{}
	for host, ranks := range [][]int{{0, 1}, {2, 3}} {
		plan, err := planShards(sd, 4, ranks, "one-file", nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := plan.localize(ctx, st, sd.Record.Schema, "parquet")
		if err != nil {
			t.Fatal(err)
		}
		share := float64(got.BytesRead) / float64(got.SplitBytes)
		t.Logf("host %d of 2: %d of %d bytes (%.3f), %d row groups of %d, %d rows", host, got.BytesRead, got.SplitBytes, share, got.Shards, len(ds.Files[0].RowGroups), got.Rows)
		if share > 0.55 {
			t.Errorf("host %d read %.3f of a one-file split: want at most 0.55", host, share)
		}
		for _, r := range ranks {
			for _, id := range requestIDs(t, plan.ranks[r].dir) {
				seen[id]++
			}
		}
	}
	for i := range int64(80_000) {
		if seen[1<<32|i] != 1 {
			t.Fatalf("row %d given %d times", i, seen[1<<32|i])
		}
	}
}

// TestShardTooFewRows: fewer rows than ranks fails before anything is
// read, naming them.
func TestShardTooFewRows(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	ctx := context.Background()
	small := splittest.WriteFiles(t, st, "s3", 3, 1, 1)
	ssd, err := split.Open(ctx, st, small)
	if err != nil {
		t.Fatal(err)
	}
	_, err = planShards(ssd, 4, []int{0}, "h0", nil)
	if nodetest.ErrType(err) != errtype.BadInput || !strings.Contains(err.Error(), "3 rows in 3 files, too few for 4 ranks") {
		t.Fatalf("3 rows for 4 ranks: %v", err)
	}
}

// TestShardCachesAreSwept: a cache no attempt touched for a day goes; a
// recent one stays for its retry.
func TestShardCachesAreSwept(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	old, recent := filepath.Join(shardCacheDir(), "old"), filepath.Join(shardCacheDir(), "recent")
	for _, d := range []string{old, recent} {
		if err := os.MkdirAll(filepath.Join(d, "w2"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	if err := os.Chtimes(old, now.Add(-25*time.Hour), now.Add(-25*time.Hour)); err != nil {
		t.Fatal(err)
	}
	sweepShardCaches(now)
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("a cache untouched for 25h is still there (%v)", err)
	}
	if _, err := os.Stat(recent); err != nil {
		t.Errorf("a recent cache went: %v", err)
	}
}
