package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/devkit/s3fault"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/nodetype"
)

var (
	lakeRows     = flag.String("lakes3.rows", "300000,2000000", "comma-separated demo table sizes (rows) for BenchmarkLakeS3")
	lakeDays     = flag.Int("lakes3.days", 4, "days of demo rows (4 days x 16 buckets is ctr-retrain's demo layout)")
	lakeDelay    = flag.Duration("lakes3.delay", 20*time.Millisecond, "latency the proxy adds to every S3 request in the slow runs")
	lakeOps      = flag.Bool("lakes3.ops", false, "print each mode's S3 requests by node and SDK operation")
	lakeBaseline = flag.Bool("lakes3.baseline", true, "also run the S3 lakes through iceberg-go's own file IO (lake.ReadConfig.Disabled): the figures before retrain's own IO layer")
)

// lakeMode is one way of keeping the lake.
type lakeMode struct {
	name     string
	s3       bool
	delay    time.Duration
	disabled bool // iceberg-go's own IO
}

// nodeFigures are one data node's time and S3 traffic.
type nodeFigures struct {
	name     string
	wall     time.Duration
	requests int64 // seen by the proxy: lake and store
	bytes    int64
	wait     time.Duration
}

// BenchmarkLakeS3 runs ctr-retrain's data nodes (stage_user, stage_ad,
// stats_user, stats_ad, promote, split) in this process, one after
// another, on demo tables of each size in -lakes3.rows over -lakes3.days
// days, with the lake on local disk and on an S3 server (versitygw)
// behind a proxy adding 0 ms and -lakes3.delay per request, and prints
// each node's time, the S3 requests the run sent (the proxy's count:
// table IO and the object store split writes to) and the ratios the
// issue sets as targets. With -lakes3.baseline the S3 runs are repeated
// with iceberg-go's own file IO: the figures before. Beside them, not in
// the totals, split_join is the feature experiment's split: the staging
// tables joined at split time onto the table before promotion.
//
//	go test ./internal/devkit/bench/ -run '^$' -bench LakeS3 -benchtime 1x -timeout 1h
func BenchmarkLakeS3(b *testing.B) {
	var sizes []int64
	for _, s := range strings.Split(*lakeRows, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || n < 1000 {
			b.Fatalf("-lakes3.rows %q: want sizes of at least 1000 rows", *lakeRows)
		}
		sizes = append(sizes, n)
	}
	modes := []lakeMode{{name: "local disk"}, {name: "S3 0ms", s3: true}, {name: fmt.Sprintf("S3 %v", *lakeDelay), s3: true, delay: *lakeDelay}}
	if *lakeBaseline {
		modes = append(modes,
			lakeMode{name: "S3 0ms, iceberg-go IO", s3: true, disabled: true},
			lakeMode{name: fmt.Sprintf("S3 %v, iceberg-go IO", *lakeDelay), s3: true, delay: *lakeDelay, disabled: true})
	}
	for range b.N {
		srv := s3test.Start(b)
		for _, rows := range sizes {
			results := map[string][]nodeFigures{}
			for i, m := range modes {
				results[m.name] = runLakeMode(b, srv, fmt.Sprintf("r%d-m%d", rows, i), rows, m)
				printLakeMode(rows, m.name, results[m.name])
			}
			printLakeTargets(rows, modes, results)
		}
	}
}

// runLakeMode writes the demo tables into a fresh lake kept as m says
// (not timed), then runs and times the data nodes on it.
func runLakeMode(b *testing.B, srv *s3test.Server, prefix string, rows int64, m lakeMode) []nodeFigures {
	b.Helper()
	ctx := context.Background()
	dir := b.TempDir()
	// Writes go through a proxy without delay; the nodes through one with.
	fast := startProxy(b, srv, 0)
	slow := startProxy(b, srv, m.delay)
	var opsMu sync.Mutex
	ops := map[string]int{}
	count := func(ev s3store.RequestEvent) {
		opsMu.Lock()
		defer opsMu.Unlock()
		if ev.NodeType != "" {
			ops[ev.NodeType+" "+ev.Operation]++
		}
	}
	defer func() {
		if *lakeOps {
			fmt.Printf("lakes3:   %s requests by node and operation: %v\n", m.name, ops)
		}
	}()
	cfg := func(p *s3fault.Proxy) lake.Config {
		if !m.s3 {
			return lake.Config{DataDir: dir}
		}
		return lake.Config{URI: "file:" + dir + "/catalog.db", Warehouse: srv.URI(prefix + "/warehouse"),
			S3: lake.S3Config{Endpoint: p.URL(), Region: srv.Region, AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey,
				Read: lake.ReadConfig{Disabled: m.disabled}, OnRequest: count}}
	}
	{
		lz := lake.NewLazy(cfg(fast), quietLog)
		cat, err := lz.Catalog(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := demodata.Write(ctx, cat, demodata.Config{Rows: rows, Days: *lakeDays}, demodata.DefaultTables, false, quietLog); err != nil {
			b.Fatal(err)
		}
		lz.Close()
	}
	// One catalog for all nodes, as a worker process has.
	lz := lake.NewLazy(cfg(slow), quietLog)
	defer lz.Close()
	cat, err := lz.Catalog(ctx)
	if err != nil {
		b.Fatal(err)
	}
	storeCfg := srv.Config(prefix + "/store")
	storeCfg.Endpoint = slow.URL()
	storeCfg.OnRequest = count
	if !m.s3 {
		storeCfg.Endpoint = fast.URL() // the dev stack's store, on loopback
	}
	st, err := s3store.Open(ctx, storeCfg)
	if err != nil {
		b.Fatal(err)
	}
	proxyOf := slow
	if !m.s3 {
		proxyOf = fast
	}
	start, end := demodata.DefaultStart.String(), (demodata.DefaultStart + backfill.Day(*lakeDays-1)).String()
	var out []nodeFigures
	timed := func(name string, run func(ctx context.Context) error) {
		before := proxyOf.Stats().Requests
		nctx, usage := s3store.WithUsage(ctx, name)
		started := time.Now()
		if err := run(nctx); err != nil {
			b.Fatalf("%s on %s: %v", name, prefix, err)
		}
		f := usage.Figures()
		out = append(out, nodeFigures{name: name, wall: time.Since(started), requests: proxyOf.Stats().Requests - before, bytes: f.Bytes, wait: f.Wait})
	}
	var staging []string
	var snaps []int64
	for _, spec := range ctrStages(start, end) {
		timed("stage_"+strings.TrimSuffix(strings.TrimPrefix(spec.Feature, "features."), "_daily"), func(ctx context.Context) error {
			res, err := features.Stage(ctx, cat, spec, quietLog)
			staging, snaps = append(staging, res.Staging), append(snaps, res.SnapshotID)
			return err
		})
	}
	for i, tbl := range staging {
		timed("stats_"+[]string{"user", "ad"}[i], func(ctx context.Context) error {
			_, err := features.Stats(ctx, cat, features.StatsSpec{Table: tbl, SnapshotID: snaps[i]}, quietLog)
			return err
		})
	}
	tbl, err := cat.Load(ctx, "ml.training")
	if err != nil {
		b.Fatal(err)
	}
	base := tbl.CurrentSnapshot().SnapshotID
	splitNode := func(node string, snap int64, join []any) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			with := ctrSplit(strconv.FormatInt(snap, 10), start, end, join)
			return runSplit(ctx, lz, st, nodetype.Input{Pipeline: "lakes3", RunID: prefix, Node: node, Type: "split", With: with})
		}
	}
	// The feature experiment's split, where a feature experiment runs it:
	// after stats, the staging tables joined on the fly onto the table
	// before promotion. The same rows as split's below.
	var join []any
	for i, tbl := range staging {
		join = append(join, map[string]any{"table": tbl, "snapshot_id": strconv.FormatInt(snaps[i], 10)})
	}
	timed("split_join", splitNode("split_join", base, join))
	var snap int64
	timed("promote", func(ctx context.Context) error {
		pr, err := features.Promote(ctx, cat, features.PromoteSpec{Training: "ml.training", Staging: staging, StartDate: start, EndDate: end}, "lakes3-"+prefix, 2, quietLog)
		snap = pr.Snapshot
		return err
	})
	timed("split", splitNode("split", snap, nil))
	return out
}

// runSplit runs a split node as a worker would and adds the S3 use the
// activity counted to ctx's.
func runSplit(ctx context.Context, lz *lake.Lazy, st *s3store.Store, in nodetype.Input) error {
	res, err := runActivity(in, split.Type(split.Deps{Catalog: lz, Store: st, Logger: quietLog}))
	if err != nil {
		return err
	}
	// The activity counted its own S3 use (nodetype.Activity).
	if u, ok := res.Outputs["s3"].(map[string]any); ok {
		if f, ok := u["bytes"].(float64); ok {
			s3store.UsageFrom(ctx).Add(0, int64(f), 0)
		}
		if f, ok := u["wait_ms"].(float64); ok {
			s3store.UsageFrom(ctx).AddWait(time.Duration(f) * time.Millisecond)
		}
	}
	return nil
}

func startProxy(b *testing.B, srv *s3test.Server, delay time.Duration) *s3fault.Proxy {
	b.Helper()
	p, err := s3fault.Start(s3fault.Config{Target: srv.Endpoint, Delay: delay})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	return p
}

// totals adds up ctr-retrain's data nodes: split_join is the feature
// experiment's alternative to promote and split, printed beside them.
func totals(fs []nodeFigures) (wall time.Duration, requests int64) {
	for _, f := range fs {
		if f.name == "split_join" {
			continue
		}
		wall += f.wall
		requests += f.requests
	}
	return wall, requests
}

func printLakeMode(rows int64, mode string, fs []nodeFigures) {
	var b strings.Builder
	wall, reqs := totals(fs)
	fmt.Fprintf(&b, "lakes3: %d rows, %-24s data nodes %6.2f s, %5d S3 requests |", rows, mode+":", wall.Seconds(), reqs)
	for _, f := range fs {
		fmt.Fprintf(&b, " %s %.2fs/%d", f.name, f.wall.Seconds(), f.requests)
	}
	fmt.Fprintln(os.Stdout, b.String())
	var w strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&w, " %s %.1f MB, waited %.2fs;", f.name, float64(f.bytes)/1e6, f.wait.Seconds())
	}
	fmt.Fprintf(os.Stdout, "lakes3:   bytes and S3 wait:%s\n", w.String())
}

// printLakeTargets prints the three ratios for one size.
func printLakeTargets(rows int64, modes []lakeMode, res map[string][]nodeFigures) {
	local, _ := totals(res[modes[0].name])
	zero, reqs := totals(res[modes[1].name])
	slow, _ := totals(res[modes[2].name])
	fmt.Printf("lakes3: %d rows: S3 %s / 0ms %.2fx (target <= 1.5x); S3 0ms / local %.2fx (target <= 2x); %d requests per run",
		rows, *lakeDelay, slow.Seconds()/zero.Seconds(), zero.Seconds()/local.Seconds(), reqs)
	if len(modes) > 3 {
		_, before := totals(res[modes[3].name])
		fmt.Printf(", %d with iceberg-go's IO (%.1fx fewer; target >= 10x)", before, float64(before)/float64(max(reqs, 1)))
	}
	fmt.Println()
}
