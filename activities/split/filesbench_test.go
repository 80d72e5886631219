package split

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/nodetype"
)

// BenchmarkSplitFilesJoin compares, on the same demo rows, the split of
// Parquet click logs that joins a feature folder (previous_day) as it
// reads them with the Iceberg path's: stage_features of the feature table
// onto ml.training, then the split that joins the staging table. It
// prints each one's time and peak RSS and the checksums of their
// datasets, which must be equal. Sizes as BenchmarkSplitJoin's:
//
//	RETRAIN_BENCH_ROWS  training rows (default 2,000,000)
//	RETRAIN_BENCH_DAYS  days (default 10)
//
//	go test ./activities/split/ -run '^$' -bench SplitFilesJoin -benchtime 1x
func BenchmarkSplitFilesJoin(b *testing.B) {
	rows := benchEnv("RETRAIN_BENCH_ROWS", 2_000_000)
	days := int(benchEnv("RETRAIN_BENCH_DAYS", 10))
	ctx := context.Background()
	lz := lake.NewLazy(lake.Config{DataDir: b.TempDir()}, quiet)
	b.Cleanup(func() { lz.Close() })
	cat, err := lz.Catalog(ctx)
	if err != nil {
		b.Fatal(err)
	}
	cfg := demodata.Config{Rows: rows, Days: days, Seed: 1}
	t0 := time.Now()
	if _, err := demodata.Write(ctx, cat, cfg, demodata.DefaultTables, false, quiet); err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	if _, err := demodata.WriteFiles(dir, cfg); err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "files join bench: %d rows x %d days written to the lake and to files in %v\n", rows, days, time.Since(t0).Round(time.Millisecond))
	start, end := demodata.DefaultStart.String(), (demodata.DefaultStart + backfill.Day(days-1)).String()
	splits := &Splits{Catalog: lz, Store: s3test.Start(b).Open(b, ""), Logger: quiet, Env: progenv.Policy{AllowPaths: []string{dir}}}
	base := func() map[string]any {
		return map[string]any{"start_date": start, "end_date": end, "max_null_rate": 1.0,
			"dense": []any{"log_activity", "logit_ctr_7d", "recency"}, "sparse": []any{"user_id", "ad_id"}}
	}
	type result struct {
		elapsed time.Duration
		stage   time.Duration
		hwm     int64
		sums    [2]Checksum
		rows    float64
		summary string
	}
	// split runs one split; the time and peak RSS are the split's (from
	// t), not the checksums' after it.
	split := func(r *result, t time.Time, peak func() (int64, uint64), run string, w map[string]any) {
		out, err := nodetest.Run(b, splits.Run, nodetype.Input{Pipeline: "bench", RunID: run, Node: "split", Type: "split", With: w}, nil)
		if err != nil {
			b.Fatal(err)
		}
		r.elapsed = time.Since(t)
		r.hwm, _ = peak()
		r.rows = out["train_rows"].(float64) + out["eval_rows"].(float64)
		r.summary = out["summary"].(string)
		for k, ds := range []string{TrainDataset, EvalDataset} {
			if r.sums[k], err = DatasetChecksum(ctx, splits.Store, out["uri"].(string), ds); err != nil {
				b.Fatal(err)
			}
		}
	}
	files := func(i int) result {
		var r result
		peak := resetPeaks()
		t := time.Now()
		w := base()
		w["files"] = filepath.Join(dir, demodata.ClicksFolder) + "/"
		w["join"] = []any{map[string]any{"files": filepath.Join(dir, demodata.SignalsFolder) + "/", "keys": []any{"user_id"}, "alignment": "previous_day"}}
		split(&r, t, peak, fmt.Sprintf("files-%d", i), w)
		return r
	}
	lakePath := func(i int) result {
		var r result
		peak := resetPeaks()
		t := time.Now()
		st, err := features.Stage(ctx, cat, features.StageSpec{Training: "ml.training", Feature: "features.user_signals", Keys: []string{"user_id"},
			StartDate: start, EndDate: end, Alignment: "previous_day", Staging: fmt.Sprintf("ml.bench_stage_%d", i)}, quiet)
		if err != nil {
			b.Fatal(err)
		}
		r.stage = time.Since(t)
		w := base()
		w["table"] = "ml.training"
		w["join"] = []any{entry(st.Staging, st.SnapshotID, nil)}
		split(&r, t, peak, fmt.Sprintf("lake-%d", i), w)
		return r
	}
	b.ResetTimer()
	for i := range b.N {
		var f, l result
		if i%2 == 0 {
			f, l = files(i), lakePath(i)
		} else {
			l, f = lakePath(i), files(i)
		}
		equal := f.sums == l.sums && f.rows == l.rows
		ratio := f.elapsed.Seconds() / l.elapsed.Seconds()
		fmt.Fprintf(os.Stderr, "files join bench (%d rows, %d days, GOMAXPROCS %d):\n", rows, days, runtime.GOMAXPROCS(0))
		fmt.Fprintf(os.Stderr, "  split of files joining a feature folder:   %8v  peak RSS %5d MiB  rows %.0f  checksums %s %s\n",
			f.elapsed.Round(time.Millisecond), f.hwm>>20, f.rows, f.sums[0].Digest, f.sums[1].Digest)
		fmt.Fprintf(os.Stderr, "  Iceberg: stage_features + split with join: %8v  peak RSS %5d MiB  rows %.0f  checksums %s %s  (stage %v)\n",
			l.elapsed.Round(time.Millisecond), l.hwm>>20, l.rows, l.sums[0].Digest, l.sums[1].Digest, l.stage.Round(time.Millisecond))
		fmt.Fprintf(os.Stderr, "  time ratio files/Iceberg %.2fx; checksums equal: %v\n  summary: %s\n", ratio, equal, f.summary)
		if !equal {
			b.Errorf("checksums differ: files %v (%v rows), Iceberg %v (%v rows)", f.sums, f.rows, l.sums, l.rows)
		}
		b.ReportMetric(ratio, "files/iceberg")
		b.ReportMetric(float64(f.hwm>>20), "files-peak-RSS-MiB")
		b.ReportMetric(float64(l.hwm>>20), "iceberg-peak-RSS-MiB")
	}
}
