package bench

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/nodetype"
)

var (
	splitJoinRows = flag.Int64("splitjoin.rows", 2_000_000, "demo training rows of BenchmarkSplitJoinPaths")
	splitJoinDays = flag.Int("splitjoin.days", 10, "days they span (the last one held out)")
)

// BenchmarkSplitJoinPaths measures the two ways from staged
// features to a trained model, on one demo table: a split that joins the
// staging tables on the fly (no promotion), against promote, then split
// the promoted table. The split and train nodes each run in a child
// process of their own (as on a worker), so their peak RSS is the node's
// own; the promotion runs in this process with one bucket group per core,
// as promote_features's groups share a worker's cores. The two splits
// must hold the same rows and values (equal checksums), and the two paths
// train on them the same model.
//
//	go test ./internal/devkit/bench/ -run '^$' -bench SplitJoinPaths -benchtime 1x -splitjoin.rows 2000000
func BenchmarkSplitJoinPaths(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("reads each node's peak RSS from /proc/self/status")
	}
	rows, days := *splitJoinRows, *splitJoinDays
	ctx := context.Background()
	dir := b.TempDir()
	lz := lake.NewLazy(lake.Config{DataDir: dir}, quietLog)
	defer lz.Close()
	cat, err := lz.Catalog(ctx)
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	if _, err := demodata.Write(ctx, cat, demodata.Config{Rows: rows, Days: days}, demodata.DefaultTables, false, quietLog); err != nil {
		b.Fatal(err)
	}
	written := time.Since(t0)
	start, end := demodata.DefaultStart.String(), (demodata.DefaultStart + backfill.Day(days-1)).String()
	tbl, err := cat.Load(ctx, "ml.training")
	if err != nil {
		b.Fatal(err)
	}
	base := strconv.FormatInt(tbl.CurrentSnapshot().SnapshotID, 10)
	// Stage 1 is shared by both paths: timed once.
	t0 = time.Now()
	var staged []features.StageResult
	for _, spec := range ctrStages(start, end) {
		st, err := features.Stage(ctx, cat, spec, quietLog)
		if err != nil {
			b.Fatal(err)
		}
		staged = append(staged, st)
	}
	stage := time.Since(t0)
	srv := s3test.Start(b)
	store := srv.Config("paths")
	reader := srv.Open(b, "paths")
	trainWith := func(data any) map[string]any {
		return map[string]any{
			"data": data, "epochs": 2, "dim": 8, "batch_size": 1024, "seed": 1,
			"transforms": map[string]any{"u_activity": "log", "u_ctr_7d": "logit", "u_sessions": "log1p", "ad_ctr_7d": "logit", "ad_age_days": "log1p"},
		}
	}
	in := func(run, node string, with map[string]any) nodetype.Input {
		return nodetype.Input{Pipeline: "paths", RunID: run, Node: node, Type: node, With: with}
	}
	sums := func(out map[string]any) [2]split.Checksum {
		var s [2]split.Checksum
		for i, ds := range []string{split.TrainDataset, split.EvalDataset} {
			c, err := split.DatasetChecksum(ctx, reader, out["uri"].(string), ds)
			if err != nil {
				b.Fatal(err)
			}
			s[i] = c
		}
		return s
	}
	b.ResetTimer()
	for i := range b.N {
		var (
			spA, trA, spB, trB nodeRun
			promote            time.Duration
			pr                 features.PromoteResult
		)
		// Path A: split joining the staging tables, then train.
		pathJoin := func() {
			var join []any
			for _, st := range staged {
				join = append(join, map[string]any{"table": st.Staging, "snapshot_id": strconv.FormatInt(st.SnapshotID, 10)})
			}
			run := fmt.Sprintf("join-%d", i)
			spA = runNode(b, "split", store, dir, in(run, "split", ctrSplit(base, start, end, join)))
			trA = runNode(b, "train", store, dir, in(run, "train", trainWith(spA.outputs["uri"])))
		}
		// Path B: promote, split the promoted table, then train.
		pathPromote := func() {
			t0 := time.Now()
			var err error
			pr, err = features.Promote(ctx, cat, features.PromoteSpec{Training: "ml.training", Staging: []string{staged[0].Staging, staged[1].Staging},
				StartDate: start, EndDate: end}, fmt.Sprintf("paths-%d", i), runtime.GOMAXPROCS(0), quietLog)
			if err != nil {
				b.Fatal(err)
			}
			promote = time.Since(t0)
			run := fmt.Sprintf("promoted-%d", i)
			spB = runNode(b, "split", store, dir, in(run, "split", ctrSplit(strconv.FormatInt(pr.Snapshot, 10), start, end, nil)))
			trB = runNode(b, "train", store, dir, in(run, "train", trainWith(spB.outputs["uri"])))
		}
		// Take turns going first: neither path always meets a warm cache
		// or a quieter machine.
		if i%2 == 0 {
			pathJoin()
			pathPromote()
		} else {
			pathPromote()
			pathJoin()
		}

		sa, sb := sums(spA.outputs), sums(spB.outputs)
		pathA := spA.wall + trA.wall
		pathB := promote + spB.wall + trB.wall
		fmt.Printf("splitjoin: round %d: %d rows over %d days (GOMAXPROCS %d): demo tables written in %s; stage 1 (both paths) %.1f s\n",
			i+1, rows, days, runtime.GOMAXPROCS(0), written.Round(time.Second), stage.Seconds())
		fmt.Printf("splitjoin:   split with join of 2 staging tables %6.1f s (CPU %6.1f s)  peak RSS %6.1f MiB\n", spA.wall.Seconds(), spA.cpu.Seconds(), float64(spA.peakKiB)/1024)
		fmt.Printf("splitjoin:   split of the promoted table         %6.1f s (CPU %6.1f s)  peak RSS %6.1f MiB\n", spB.wall.Seconds(), spB.cpu.Seconds(), float64(spB.peakKiB)/1024)
		fmt.Printf("splitjoin:   split time ratio join/promoted %.2fx (CPU %.2fx); checksums equal: %v (%s %s)\n",
			spA.wall.Seconds()/spB.wall.Seconds(), spA.cpu.Seconds()/spB.cpu.Seconds(), sa == sb, sa[0].Digest, sa[1].Digest)
		fmt.Printf("splitjoin:   path stage -> split (join) -> train:          %6.1f s (split %.1f + train %.1f; loss %v)\n",
			stage.Seconds()+pathA.Seconds(), spA.wall.Seconds(), trA.wall.Seconds(), trA.outputs["loss"])
		fmt.Printf("splitjoin:   path stage -> promote -> split -> train:      %6.1f s (promote %.1f + split %.1f + train %.1f; loss %v)\n",
			stage.Seconds()+pathB.Seconds(), promote.Seconds(), spB.wall.Seconds(), trB.wall.Seconds(), trB.outputs["loss"])
		fmt.Printf("splitjoin:   to a trained model, skipping promotion takes %.2fx the time (after stage 1: %.2fx)\n",
			(stage+pathA).Seconds()/(stage+pathB).Seconds(), pathA.Seconds()/pathB.Seconds())
		if sa != sb {
			b.Errorf("checksums differ: join %v, promoted %v", sa, sb)
		}
		b.ReportMetric(spA.wall.Seconds()/spB.wall.Seconds(), "split-join/promoted")
		b.ReportMetric(float64(spA.peakKiB)/1024, "split-join-peak-MiB")
		b.ReportMetric(pathA.Seconds()/pathB.Seconds(), "path-join/promote")
		// Put the table back for the next round's promotion.
		if i+1 < b.N {
			if _, err := cat.Rollback(ctx, "ml.training", pr.PreviousSnapshot); err != nil {
				b.Fatal(err)
			}
		}
	}
}
