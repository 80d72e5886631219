package features

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/lake"
)

// The benchmarks run on the demo data set. Sizes come from the environment
// so a quick run can be small:
//
//	RETRAIN_BENCH_ROWS  training rows (default 10,000,000)
//	RETRAIN_BENCH_DAYS  days (default 30)
//	RETRAIN_BENCH_DIR   keep the lake here between runs (default: a temp dir, removed)
//
// For example:
//
//	RETRAIN_BENCH_ROWS=1000000 go test -run '^$' -bench . -benchtime 1x ./features

func envInt(key string, def int64) int64 {
	if v, err := strconv.ParseInt(os.Getenv(key), 10, 64); err == nil && v > 0 {
		return v
	}
	return def
}

var (
	benchRows = envInt("RETRAIN_BENCH_ROWS", 10_000_000)
	benchDays = int(envInt("RETRAIN_BENCH_DAYS", 30))
	benchLog  = slog.New(slog.NewTextHandler(io.Discard, nil))
	// benchWorkers is how many bucket groups run at once, as activities
	// would on one worker (RETRAIN_BENCH_WORKERS, default one per core).
	benchWorkers = int(envInt("RETRAIN_BENCH_WORKERS", int64(runtime.NumCPU())))
	benchTmp     string // removed by TestMain
)

func TestMain(m *testing.M) {
	code := m.Run()
	if benchTmp != "" {
		os.RemoveAll(benchTmp)
	}
	os.Exit(code)
}

type benchEnv struct {
	cat        *lake.Catalog
	start, end string
}

var (
	benchOnce   sync.Once
	benchShared *benchEnv
	benchErr    error
)

// demoTables writes (or reuses, when a kept lake already holds them at
// this size) a demo data set.
func demoTables(ctx context.Context, cat *lake.Catalog, cfg demodata.Config, tables demodata.Tables) error {
	if tbl, err := cat.Load(ctx, tables.Training); err == nil && tbl.CurrentSnapshot() != nil {
		props := tbl.Metadata().Snapshots()[0].Summary.Properties
		if props["retrain.demo-rows"] == strconv.FormatInt(cfg.Rows, 10) && props["retrain.demo-days"] == strconv.Itoa(cfg.Days) {
			// Back to the demo snapshot, in case a run was interrupted.
			first := tbl.Metadata().Snapshots()[0].SnapshotID
			if _, err := cat.Rollback(ctx, tables.Training, first); err != nil {
				return err
			}
			return nil
		}
	}
	start := time.Now()
	res, err := demodata.Write(ctx, cat, cfg, tables, true, benchLog)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: generated %s: %d rows in %v (%.0f rows/s)\n", tables.Training, res.TrainingRows, time.Since(start).Round(time.Millisecond), float64(res.TrainingRows)/time.Since(start).Seconds())
	return nil
}

func setupBench(b *testing.B) *benchEnv {
	b.Helper()
	benchOnce.Do(func() {
		ctx := context.Background()
		dir := os.Getenv("RETRAIN_BENCH_DIR")
		if dir == "" {
			if dir, benchErr = os.MkdirTemp("", "retrain-bench-"); benchErr != nil {
				return
			}
			benchTmp = dir
		}
		cat, err := lake.Open(ctx, lake.Config{DataDir: dir}, benchLog)
		if err != nil {
			benchErr = err
			return
		}
		cfg := demodata.Config{Rows: benchRows, Days: benchDays, Seed: 1}
		if benchErr = demoTables(ctx, cat, cfg, demodata.DefaultTables); benchErr != nil {
			return
		}
		benchShared = &benchEnv{cat: cat, start: demodata.DefaultStart.String(), end: (demodata.DefaultStart + backfill.Day(benchDays-1)).String()}
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchShared
}

func (e *benchEnv) stage(b *testing.B, feature, staging, prefix string, keys []string, align string) StageResult {
	b.Helper()
	res, err := Stage(context.Background(), e.cat, StageSpec{
		Training: "ml.training", Feature: feature, Keys: keys, StartDate: e.start, EndDate: e.end,
		Alignment: align, Prefix: prefix, Staging: staging,
	}, benchLog)
	if err != nil {
		b.Fatal(err)
	}
	return res
}

var stagedOnce sync.Once

// staged makes the staging tables the promotion benchmarks promote.
func (e *benchEnv) staged(b *testing.B) []string {
	stagedOnce.Do(func() {
		e.stage(b, "features.user_daily", "ml.bench_s_user", "u_", []string{"user_id"}, "previous_day")
		e.stage(b, "features.ad_daily", "ml.bench_s_ad", "", []string{"ad_id"}, "previous_day")
	})
	return []string{"ml.bench_s_user", "ml.bench_s_ad"}
}

// BenchmarkStage measures stage 1: the user feature group (five float
// features and a list) joined onto every training row.
func BenchmarkStage(b *testing.B) {
	e := setupBench(b)
	for _, align := range []string{"previous_day", "as_of"} {
		b.Run(align, func(b *testing.B) {
			var rows int64
			start := time.Now()
			for range b.N {
				rows += e.stage(b, "features.user_daily", "ml.bench_stage_"+align, "u_", []string{"user_id"}, align).Rows
			}
			b.ReportMetric(float64(rows)/time.Since(start).Seconds(), "rows/s")
		})
	}
}

func (e *benchEnv) rollback(b *testing.B, to int64) {
	b.Helper()
	if _, err := e.cat.Rollback(context.Background(), "ml.training", to); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPromote measures stage 2, bucketed (one goroutine per core,
// as a worker would run the bucket activities), against a naive full
// hash join of the same tables: one hash table over every staged row, one
// scan of every training row, the same writer and the same commit. After
// each promotion the table is rolled back (not timed).
func BenchmarkPromote(b *testing.B) {
	e := setupBench(b)
	staging := e.staged(b)
	ctx := context.Background()
	spec := PromoteSpec{Training: "ml.training", Staging: staging, StartDate: e.start, EndDate: e.end}
	var bucketed, naive, bucketedJoin, naiveJoin time.Duration
	var rows int64
	var bucketedPeak, naivePeak uint64
	for i := range b.N {
		stop := peakHeap()
		start := time.Now()
		res, err := Promote(ctx, e.cat, spec, fmt.Sprintf("bench/%d/%d", time.Now().UnixNano(), i), benchWorkers, benchLog)
		if err != nil {
			b.Fatal(err)
		}
		bucketed += time.Since(start)
		bucketedPeak = max(bucketedPeak, stop())
		bucketedJoin += res.JoinTime
		rows += res.Rows
		b.StopTimer()
		e.rollback(b, res.PreviousSnapshot)
		b.StartTimer()

		stop = peakHeap()
		start = time.Now()
		prev, n, join, err := promoteNaive(ctx, e.cat, spec, fmt.Sprintf("naive/%d/%d", time.Now().UnixNano(), i))
		if err != nil {
			b.Fatal(err)
		}
		naive += time.Since(start)
		naivePeak = max(naivePeak, stop())
		naiveJoin += join
		if n != res.Rows {
			b.Fatalf("naive join promoted %d rows, bucketed %d", n, res.Rows)
		}
		b.StopTimer()
		e.rollback(b, prev)
		b.StartTimer()
	}
	b.ReportMetric(float64(rows)/bucketed.Seconds(), "bucketed_rows/s")
	b.ReportMetric(float64(rows)/naive.Seconds(), "naive_rows/s")
	b.ReportMetric(naive.Seconds()/bucketed.Seconds(), "speedup_x")
	// Time in the join itself (staging read, index or zip, gather); the
	// bucketed figure is summed over bucket groups that ran concurrently.
	b.ReportMetric(float64(bucketedPeak)/(1<<20), "bucketed_peak_heap_MiB")
	b.ReportMetric(float64(naivePeak)/(1<<20), "naive_peak_heap_MiB")
	b.ReportMetric(bucketedJoin.Seconds(), "bucketed_join_s")
	b.ReportMetric(naiveJoin.Seconds(), "naive_join_s")
}

// peakHeap samples the live heap every 50ms until the returned function
// is called, which returns the highest sample.
func peakHeap() func() uint64 {
	runtime.GC()
	done := make(chan struct{})
	result := make(chan uint64)
	go func() {
		var peak uint64
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			peak = max(peak, sample[0].Value.Uint64())
			select {
			case <-done:
				result <- peak
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 { close(done); return <-result }
}

// promoteNaive promotes like PromoteBuckets but without buckets: the whole
// staging side goes into one hash table, every training row is scanned and
// probes it, and one write covers every partition.
func promoteNaive(ctx context.Context, cat *lake.Catalog, spec PromoteSpec, id string) (prev, rows int64, join time.Duration, err error) {
	plan, err := PlanPromotion(ctx, cat, spec, id)
	if err != nil {
		return 0, 0, 0, err
	}
	s, err := resolve(ctx, cat, plan)
	if err != nil {
		return 0, 0, 0, err
	}
	filter := table.WithRowFilter(lake.DateRange(plan.Spec.DateColumn, int32(s.rng.Start), int32(s.rng.End)))
	mem := memory.NewGoAllocator()
	res := BucketResult{Buckets: []int{-1}}
	j := &bucketJoin{plan: plan, s: s, mem: mem, res: &res}
	if j.out, err = table.SchemaToArrowSchema(s.target.Schema(), nil, true, false); err != nil {
		return 0, 0, 0, err
	}
	t0 := time.Now()
	sides := make([]*stagingSide, len(s.staging))
	for i, st := range s.staging {
		names := j.columnsOf(i)
		pk := s.checked.PrimaryKey
		arrs, _, err := readAll(ctx, mem, st.Scan(filter, table.WithSnapshotID(plan.StagingSnapshots[i])), append(append([]string{}, pk...), names...))
		if err != nil {
			return 0, 0, 0, err
		}
		defer release(arrs)
		ix, err := backfill.NewKeyIndex(pk, arrs[:len(pk)])
		if err != nil {
			return 0, 0, 0, err
		}
		sides[i] = &stagingSide{names: names, keys: arrs[:len(pk)], cols: arrs[len(pk):], index: ix}
	}
	res.JoinTime += time.Since(t0)
	trainScan := s.training.Scan(filter)
	replaced, err := lake.FilesOf(ctx, trainScan)
	if err != nil {
		return 0, 0, 0, err
	}
	_, recs, err := trainScan.ToArrowRecords(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	var joinErr error
	records := func(yield func(arrow.RecordBatch, error) bool) {
		for rec, err := range recs {
			if err != nil {
				yield(nil, err)
				return
			}
			t0 := time.Now()
			out, err := j.join(ctx, rec, sides)
			res.JoinTime += time.Since(t0)
			rec.Release()
			if err != nil {
				joinErr = err
				yield(nil, err)
				return
			}
			if !yield(out, nil) {
				return
			}
		}
	}
	files, err := lake.WriteFiles(ctx, s.target.Table, j.out, records)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("%w (join: %v)", err, joinErr)
	}
	// Commit like a promotion: one replacement of every file in the range.
	encoded, err := lake.EncodeDataFiles(s.target.Table, s.target.Schema(), files)
	if err != nil {
		return 0, 0, 0, err
	}
	var paths []string
	for _, df := range replaced {
		paths = append(paths, df.FilePath())
	}
	uri := plan.PendingDir + "/naive.json"
	if err := writePending(ctx, s.target.Table, uri, pending{Promotion: plan.ID, Buckets: res.Buckets, Replaced: paths, Added: encoded}); err != nil {
		return 0, 0, 0, err
	}
	c, err := CommitPromotion(ctx, cat, plan, []BucketResult{{URI: uri}}, benchLog)
	if err != nil {
		return 0, 0, 0, err
	}
	if c.Conflict {
		return 0, 0, 0, fmt.Errorf("naive promotion conflicted: %s", c.Reason)
	}
	return c.PreviousSnapshot, res.Rows, res.JoinTime, nil
}

// BenchmarkRollback compares rolling back a table of benchRows rows with
// rolling back one of 100,000 rows. Both tables get the same history (the
// demo data's files added in one snapshot, then one snapshot removing a
// file), so the comparison is of table size alone; main moves back and
// forth between the two snapshots.
func BenchmarkRollback(b *testing.B) {
	e := setupBench(b)
	ctx := context.Background()
	small := demodata.Tables{Training: "small.training", Users: "small.user_daily", Ads: "small.ad_daily"}
	if err := demoTables(ctx, e.cat, demodata.Config{Rows: 100_000, Days: benchDays, Seed: 2}, small); err != nil {
		b.Fatal(err)
	}
	var subjects []*rollbackSubject
	for _, src := range []string{"ml.training", "small.training"} {
		name := "rollback." + src[:len(src)-len(".training")]
		s, err := copyTable(ctx, e.cat, src, name)
		if err != nil {
			b.Fatal(err)
		}
		subjects = append(subjects, s)
	}
	b.ResetTimer()
	for range b.N {
		for _, s := range subjects {
			for _, to := range []int64{s.from, s.to} {
				start := time.Now()
				if _, err := e.cat.Rollback(ctx, s.name, to); err != nil {
					b.Fatal(err)
				}
				s.took += time.Since(start)
			}
		}
	}
	per := func(s *rollbackSubject) float64 { return float64(s.took.Microseconds()) / 1000 / float64(2*b.N) }
	b.ReportMetric(per(subjects[0]), "large_ms/rollback")
	b.ReportMetric(per(subjects[1]), "small_ms/rollback")
	b.ReportMetric(per(subjects[0])/per(subjects[1]), "large/small")
	b.Logf("large: %s (%d files), small: %s (%d files)", subjects[0].name, subjects[0].files, subjects[1].name, subjects[1].files)
}

type rollbackSubject struct {
	name     string
	from, to int64
	took     time.Duration
	files    int
}

// copyTable makes a fresh table over src's data files (no data copied)
// with two snapshots: all files, then all but one. It returns the two.
func copyTable(ctx context.Context, cat *lake.Catalog, src, name string) (*rollbackSubject, error) {
	s, err := cat.Load(ctx, src)
	if err != nil {
		return nil, err
	}
	files, err := lake.FilesOf(ctx, s.Scan())
	if err != nil {
		return nil, err
	}
	if err := cat.DropTable(ctx, name); err != nil {
		return nil, err
	}
	spec := s.Spec()
	if _, err := cat.CreateTable(ctx, name, s.Schema(), lake.TableSpec{Partition: &spec}); err != nil {
		return nil, err
	}
	first, err := cat.AddFiles(ctx, name, files, nil)
	if err != nil {
		return nil, err
	}
	second, err := cat.Update(ctx, name, func(ctx context.Context, _ *table.Table, tx *table.Transaction) error {
		return lake.ReplaceFiles(ctx, tx, files[:1], nil, iceberg.Properties{})
	})
	if err != nil {
		return nil, err
	}
	return &rollbackSubject{name: name, from: first.CurrentSnapshot().SnapshotID, to: second.CurrentSnapshot().SnapshotID, files: len(files)}, nil
}

// BenchmarkFileSize compares the bytes of the training table (sorted by
// user within date x bucket files) with the same rows unsorted, before and
// after promoting the user features into both.
func BenchmarkFileSize(b *testing.B) {
	e := setupBench(b)
	ctx := context.Background()
	unsorted := demodata.Tables{Training: "unsorted.training", Users: "unsorted.user_daily", Ads: "unsorted.ad_daily"}
	if err := demoTables(ctx, e.cat, demodata.Config{Rows: benchRows, Days: benchDays, Seed: 1, Unsorted: true}, unsorted); err != nil {
		b.Fatal(err)
	}
	for range b.N {
		sorted, err := tableBytes(ctx, e.cat, "ml.training")
		if err != nil {
			b.Fatal(err)
		}
		shuffled, err := tableBytes(ctx, e.cat, "unsorted.training")
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(sorted)/(1<<20), "sorted_MiB")
		b.ReportMetric(float64(shuffled)/(1<<20), "unsorted_MiB")
		b.ReportMetric(float64(sorted)/float64(shuffled), "sorted/unsorted")

		// With the user features promoted into both.
		var promoted, features [2]int64
		for i, t := range []string{"ml.training", "unsorted.training"} {
			st, err := Stage(ctx, e.cat, StageSpec{Training: t, Feature: "features.user_daily", Keys: []string{"user_id"},
				StartDate: e.start, EndDate: e.end, Alignment: "previous_day", Prefix: "u_", Staging: t + "_size_s_user"}, benchLog)
			if err != nil {
				b.Fatal(err)
			}
			res, err := Promote(ctx, e.cat, PromoteSpec{Training: t, Staging: []string{st.Staging}, StartDate: e.start, EndDate: e.end}, fmt.Sprintf("size/%d", time.Now().UnixNano()), 2, benchLog)
			if err != nil {
				b.Fatal(err)
			}
			if promoted[i], err = tableBytes(ctx, e.cat, t); err != nil {
				b.Fatal(err)
			}
			if features[i], err = columnBytes(ctx, e.cat, t, "u_"); err != nil {
				b.Fatal(err)
			}
			if _, err := e.cat.Rollback(ctx, t, res.PreviousSnapshot); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(promoted[0])/(1<<20), "sorted_promoted_MiB")
		b.ReportMetric(float64(promoted[1])/(1<<20), "unsorted_promoted_MiB")
		b.ReportMetric(float64(promoted[0])/float64(promoted[1]), "promoted_sorted/unsorted")
		// The promoted user features alone: one value per user and day,
		// repeated for each of the user's rows, which sorting by user turns
		// into runs.
		b.ReportMetric(float64(features[0])/float64(features[1]), "user_features_sorted/unsorted")
	}
}

// columnBytes sums the compressed bytes of the columns whose names start
// with prefix, from the data files' column statistics.
func columnBytes(ctx context.Context, cat *lake.Catalog, name, prefix string) (int64, error) {
	tbl, err := cat.Load(ctx, name)
	if err != nil {
		return 0, err
	}
	files, err := lake.FilesOf(ctx, tbl.Scan())
	if err != nil {
		return 0, err
	}
	var n int64
	for _, f := range files {
		for id, size := range f.ColumnSizes() {
			if col, ok := tbl.Schema().FindColumnName(id); ok && strings.HasPrefix(col, prefix) {
				n += size
			}
		}
	}
	return n, nil
}

func tableBytes(ctx context.Context, cat *lake.Catalog, name string) (int64, error) {
	tbl, err := cat.Load(ctx, name)
	if err != nil {
		return 0, err
	}
	files, err := lake.FilesOf(ctx, tbl.Scan())
	if err != nil {
		return 0, err
	}
	var n int64
	for _, f := range files {
		n += f.FileSizeBytes()
	}
	return n, nil
}
