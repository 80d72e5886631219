// Command peer runs retrain's backfill data plane (stage 1 under the
// previous_day and as_of alignments, and the bucketed promotion) and
// DuckDB's SQL for the same joins on the same Parquet files, in
// alternating rounds, checks that both wrote the same rows, and prints a
// markdown table of medians and ratios.
//
// DuckDB runs in a Node.js child process (duck.mjs, through the
// @duckdb/node-api package that run.sh installs under .node/), so the
// product's module never depends on it. Run it through run.sh:
//
//	benchmarks/peer/run.sh --rows 2000000 --days 10 --rounds 3
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
)

func main() {
	var o options
	flag.Int64Var(&o.rows, "rows", 2_000_000, "training rows to generate")
	flag.IntVar(&o.days, "days", 10, "days the rows span")
	flag.IntVar(&o.rounds, "rounds", 3, "alternating rounds; the table shows medians")
	flag.StringVar(&o.dir, "dir", "", "keep the generated lake and outputs here (reused when it holds data of this size); default a temporary dir, removed")
	flag.StringVar(&o.node, "node", "node", "the Node.js binary")
	flag.StringVar(&o.script, "script", "", "duck.mjs (default: next to this source, benchmarks/peer/duck.mjs)")
	flag.StringVar(&o.only, "only", "", "run only these jobs, comma-separated (stage_previous_day, stage_as_of, promote)")
	flag.Parse()
	if err := run(context.Background(), o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "peer:", err)
		os.Exit(1)
	}
}

type options struct {
	rows         int64
	days, rounds int
	dir          string
	node, script string
	only         string
}

// sample is one timed run of one job by one engine.
type sample struct {
	wall, cpu float64 // seconds
}

// job is one of the compared operations: retrain's side runs in this
// process, DuckDB's in a child process.
type job struct {
	name    string
	retrain func(ctx context.Context) (sample, []string, error) // and the files it wrote
	duck    duckJob
	columns []string // the output columns both sides must agree on
	// retrainFiles and duckDir are the outputs of the last round, which
	// are checked against each other.
	retrainFiles []string
	times        map[string][]sample
}

func run(ctx context.Context, o options, out io.Writer) error {
	if o.rows <= 0 || o.days <= 0 || o.rounds <= 0 {
		return fmt.Errorf("--rows, --days and --rounds must be positive (got %d, %d, %d)", o.rows, o.days, o.rounds)
	}
	if o.script == "" {
		o.script = "benchmarks/peer/duck.mjs"
	}
	if _, err := os.Stat(o.script); err != nil {
		return fmt.Errorf("duck.mjs: %w (run from the repository root, or pass --script)", err)
	}
	if o.dir == "" {
		d, err := os.MkdirTemp("", "retrain-peer-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		o.dir = d
	}
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cat, err := lake.Open(ctx, lake.Config{DataDir: filepath.Join(dir, "lake")}, log)
	if err != nil {
		return err
	}
	defer cat.Close()
	cfg := demodata.Config{Rows: o.rows, Days: o.days, Seed: 1}
	if err := generate(ctx, cat, cfg, log); err != nil {
		return err
	}
	first := demodata.DefaultStart
	last := first + backfill.Day(o.days-1)
	b := &bench{o: o, dir: dir, cat: cat, log: log, start: first.String(), end: last.String(), first: first, last: last}
	jobs, err := b.jobs(ctx)
	if err != nil {
		return err
	}
	if o.only != "" {
		keep := strings.Split(o.only, ",")
		jobs = slices.DeleteFunc(jobs, func(j *job) bool { return !slices.Contains(keep, j.name) })
	}
	for r := range o.rounds {
		for _, j := range jobs {
			// Alternate who goes first, so neither side always runs on
			// the caches (and the heap) the other left behind.
			engines := []string{"retrain", "duckdb"}
			if r%2 == 1 {
				engines = []string{"duckdb", "retrain"}
			}
			for _, e := range engines {
				var s sample
				var err error
				if e == "retrain" {
					s, j.retrainFiles, err = j.retrain(ctx)
				} else {
					s, err = b.duck(ctx, j.duck)
				}
				if err != nil {
					return fmt.Errorf("round %d, %s, %s: %w", r+1, j.name, e, err)
				}
				j.times[e] = append(j.times[e], s)
				fmt.Fprintf(os.Stderr, "peer: round %d %-18s %-7s %6.2fs wall %6.2fs cpu\n", r+1, j.name, e, s.wall, s.cpu)
			}
		}
	}
	checks := make([]string, len(jobs))
	for i, j := range jobs {
		c, err := b.check(ctx, j)
		if err != nil {
			return fmt.Errorf("%s: %w", j.name, err)
		}
		checks[i] = c
	}
	printTable(out, o, jobs, checks)
	return nil
}

// generate writes the demo data set unless the lake holds it at this size.
func generate(ctx context.Context, cat *lake.Catalog, cfg demodata.Config, log *slog.Logger) error {
	tables := demodata.DefaultTables
	if tbl, err := cat.Load(ctx, tables.Training); err == nil && tbl.CurrentSnapshot() != nil {
		props := tbl.Metadata().Snapshots()[0].Summary.Properties
		if props["retrain.demo-rows"] == strconv.FormatInt(cfg.Rows, 10) && props["retrain.demo-days"] == strconv.Itoa(cfg.Days) {
			// Back to the generated snapshot, in case a run was interrupted
			// between a promotion and its rollback.
			_, err := cat.Rollback(ctx, tables.Training, tbl.Metadata().Snapshots()[0].SnapshotID)
			return err
		}
	}
	start := time.Now()
	res, err := demodata.Write(ctx, cat, cfg, tables, true, log)
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	fmt.Fprintf(os.Stderr, "peer: generated %d training rows over %d days in %v\n", res.TrainingRows, cfg.Days, time.Since(start).Round(time.Millisecond))
	return nil
}

type bench struct {
	o           options
	dir         string
	cat         *lake.Catalog
	log         *slog.Logger
	start, end  string
	first, last backfill.Day
}

// cpuSeconds is this process's user and system time so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// timed runs f and measures its wall and CPU time. A GC first, so one
// job's garbage is not collected on the next job's time.
func timed(f func() error) (sample, error) {
	runtime.GC()
	c0, t0 := cpuSeconds(), time.Now()
	err := f()
	return sample{wall: time.Since(t0).Seconds(), cpu: cpuSeconds() - c0}, err
}

// tableFiles lists the local paths of a table's data files in its
// current snapshot.
func tableFiles(ctx context.Context, cat *lake.Catalog, name string) ([]string, error) {
	tbl, err := cat.Load(ctx, name)
	if err != nil {
		return nil, err
	}
	return scanFiles(ctx, tbl.Scan())
}

func scanFiles(ctx context.Context, scan *table.Scan) ([]string, error) {
	files, err := lake.FilesOf(ctx, scan)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = strings.TrimPrefix(f.FilePath(), "file://")
	}
	slices.Sort(out)
	return out, nil
}

func (b *bench) stageSpec(feature, staging, prefix string, keys []string, align string) features.StageSpec {
	return features.StageSpec{
		Training: demodata.DefaultTables.Training, Feature: feature, Keys: keys,
		StartDate: b.start, EndDate: b.end, Alignment: align, Prefix: prefix, Staging: staging,
	}
}

func (b *bench) stage(spec features.StageSpec) func(ctx context.Context) (sample, []string, error) {
	return func(ctx context.Context) (sample, []string, error) {
		s, err := timed(func() error {
			_, err := features.Stage(ctx, b.cat, spec, b.log)
			return err
		})
		if err != nil {
			return s, nil, err
		}
		files, err := tableFiles(ctx, b.cat, spec.Staging)
		return s, files, err
	}
}

func printTable(w io.Writer, o options, jobs []*job, checks []string) {
	fmt.Fprintf(w, "\n%d rows over %d days, %d rounds (medians), %d cores\n\n", o.rows, o.days, o.rounds, runtime.NumCPU())
	fmt.Fprintln(w, "| job | retrain s | retrain CPU s | DuckDB s | DuckDB CPU s | retrain/DuckDB time | retrain/DuckDB CPU | outputs |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---|")
	for i, j := range jobs {
		r, d := median(j.times["retrain"]), median(j.times["duckdb"])
		fmt.Fprintf(w, "| %s | %.2f | %.2f | %.2f | %.2f | %.2fx | %.2fx | %s |\n", j.name, r.wall, r.cpu, d.wall, d.cpu, r.wall/d.wall, r.cpu/d.cpu, checks[i])
	}
}

func median(ss []sample) sample {
	walls := make([]float64, len(ss))
	cpus := make([]float64, len(ss))
	for i, s := range ss {
		walls[i], cpus[i] = s.wall, s.cpu
	}
	slices.Sort(walls)
	slices.Sort(cpus)
	mid := func(v []float64) float64 {
		if len(v) == 0 {
			return 0
		}
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return sample{wall: mid(walls), cpu: mid(cpus)}
}
