package split

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/nodetype"
)

// BenchmarkSplitJoin compares, on the demo data, a split whose window
// joins two staging tables on the fly with the split of the same window
// of the table those staging tables were promoted into: time, peak RSS
// and peak live heap of each, and the checksums of their datasets, which
// must be equal. Sizes come from the environment:
//
//	RETRAIN_BENCH_ROWS  training rows (default 2,000,000)
//	RETRAIN_BENCH_DAYS  days (default 10)
//
//	go test ./activities/split/ -run '^$' -bench SplitJoin -benchtime 1x
func BenchmarkSplitJoin(b *testing.B) {
	rows := benchEnv("RETRAIN_BENCH_ROWS", 2_000_000)
	days := int(benchEnv("RETRAIN_BENCH_DAYS", 10))
	ctx := context.Background()
	lz := lake.NewLazy(lake.Config{DataDir: b.TempDir()}, quiet)
	b.Cleanup(func() { lz.Close() })
	cat, err := lz.Catalog(ctx)
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	if _, err := demodata.Write(ctx, cat, demodata.Config{Rows: rows, Days: days, Seed: 1}, demodata.DefaultTables, false, quiet); err != nil {
		b.Fatal(err)
	}
	start, end := demodata.DefaultStart.String(), (demodata.DefaultStart + backfill.Day(days-1)).String()
	tbl, err := cat.Load(ctx, "ml.training")
	if err != nil {
		b.Fatal(err)
	}
	base := tbl.CurrentSnapshot().SnapshotID
	stage := func(feature, prefix string, keys []string) features.StageResult {
		res, err := features.Stage(ctx, cat, features.StageSpec{Training: "ml.training", Feature: feature, Keys: keys,
			StartDate: start, EndDate: end, Alignment: "previous_day", Prefix: prefix}, quiet)
		if err != nil {
			b.Fatal(err)
		}
		return res
	}
	user := stage("features.user_daily", "u_", []string{"user_id"})
	ad := stage("features.ad_daily", "", []string{"ad_id"})
	pr, err := features.Promote(ctx, cat, features.PromoteSpec{Training: "ml.training", Staging: []string{user.Staging, ad.Staging},
		StartDate: start, EndDate: end}, "bench", runtime.NumCPU(), quiet)
	if err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "split join bench: %d rows x %d days generated, staged and promoted in %v\n", rows, days, time.Since(t0).Round(time.Millisecond))
	splits := &Splits{Catalog: lz, Store: s3test.Start(b).Open(b, ""), Logger: quiet}
	with := func(snap int64) map[string]any {
		return map[string]any{"table": "ml.training", "snapshot_id": strconv.FormatInt(snap, 10), "start_date": start, "end_date": end,
			"dense": []any{"u_activity", "u_ctr_7d", "u_sessions", "ad_quality", "ad_ctr_7d"}, "sparse": []any{"user_id", "ad_id", "u_recent_ads"},
			"max_null_rate": 1.0}
	}
	type result struct {
		elapsed  time.Duration
		hwm      int64 // peak RSS during the split, bytes
		heap     uint64
		sums     [2]Checksum
		rows     float64
		summary  string
		snapshot int64
	}
	run := func(name string, i int, w map[string]any) result {
		peak := resetPeaks()
		t := time.Now()
		out, err := nodetest.Run(b, splits.Run, nodetype.Input{Pipeline: "bench", RunID: fmt.Sprintf("%s-%d", name, i), Node: "split", Type: "split", With: w}, nil)
		if err != nil {
			b.Fatal(err)
		}
		r := result{elapsed: time.Since(t)}
		r.hwm, r.heap = peak()
		r.rows = out["train_rows"].(float64) + out["eval_rows"].(float64)
		r.summary = out["summary"].(string)
		for k, ds := range []string{TrainDataset, EvalDataset} {
			if r.sums[k], err = DatasetChecksum(ctx, splits.Store, out["uri"].(string), ds); err != nil {
				b.Fatal(err)
			}
		}
		return r
	}
	b.ResetTimer()
	for i := range b.N {
		jw := with(base)
		jw["join"] = []any{entry(user.Staging, user.SnapshotID, nil), entry(ad.Staging, ad.SnapshotID, nil)}
		// Alternate which goes first, so neither always gets the warm cache.
		var joined, promoted result
		if i%2 == 0 {
			joined, promoted = run("join", i, jw), run("promoted", i, with(pr.Snapshot))
		} else {
			promoted, joined = run("promoted", i, with(pr.Snapshot)), run("join", i, jw)
		}
		equal := joined.sums == promoted.sums && joined.rows == promoted.rows
		ratio := joined.elapsed.Seconds() / promoted.elapsed.Seconds()
		fmt.Fprintf(os.Stderr, "split join bench (%d rows, %d days, GOMAXPROCS %d):\n", rows, days, runtime.GOMAXPROCS(0))
		fmt.Fprintf(os.Stderr, "  split with join of 2 staging tables: %8v  peak RSS %5d MiB  peak heap %5d MiB  rows %.0f  checksums %s %s\n",
			joined.elapsed.Round(time.Millisecond), joined.hwm>>20, joined.heap>>20, joined.rows, joined.sums[0].Digest, joined.sums[1].Digest)
		fmt.Fprintf(os.Stderr, "  split of the promoted table:         %8v  peak RSS %5d MiB  peak heap %5d MiB  rows %.0f  checksums %s %s\n",
			promoted.elapsed.Round(time.Millisecond), promoted.hwm>>20, promoted.heap>>20, promoted.rows, promoted.sums[0].Digest, promoted.sums[1].Digest)
		fmt.Fprintf(os.Stderr, "  time ratio join/promoted %.2fx; checksums equal: %v\n  summary: %s\n", ratio, equal, joined.summary)
		if !equal {
			b.Errorf("checksums differ: join %v (%v rows), promoted %v (%v rows)", joined.sums, joined.rows, promoted.sums, promoted.rows)
		}
		b.ReportMetric(ratio, "join/promoted")
		b.ReportMetric(float64(joined.hwm>>20), "join-peak-RSS-MiB")
		b.ReportMetric(float64(promoted.hwm>>20), "promoted-peak-RSS-MiB")
	}
}

func benchEnv(key string, def int64) int64 {
	if v, err := strconv.ParseInt(os.Getenv(key), 10, 64); err == nil && v > 0 {
		return v
	}
	return def
}

// resetPeaks returns the process's memory to the OS, resets its peak RSS
// (VmHWM, by writing 5 to /proc/self/clear_refs) and samples the live
// heap until the returned function is called, which returns the peak RSS
// since the reset and the highest heap sample.
func resetPeaks() func() (int64, uint64) {
	debug.FreeOSMemory()
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // best effort: the RSS peak then covers the whole process life
	done := make(chan struct{})
	heap := make(chan uint64)
	go func() {
		var peak uint64
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(sample)
			peak = max(peak, sample[0].Value.Uint64())
			select {
			case <-done:
				heap <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return func() (int64, uint64) {
		close(done)
		return vmHWM(), <-heap
	}
}

// vmHWM reads the process's peak RSS from /proc/self/status; 0 if it
// cannot.
func vmHWM() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("VmHWM:")); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(string(rest)), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
