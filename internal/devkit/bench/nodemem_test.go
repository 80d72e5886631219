package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/activities/evaluate"
	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/activities/train"
	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/nodetype"
)

// The node memory benchmark's table sizes: each is generated, staged and
// promoted as ctr-retrain does, then split, train and evaluate each run in
// a child process of their own, whose peak RSS (VmHWM) is the node's.
var nodememRows = flag.String("nodemem.rows", "200000,2000000", "comma-separated demo table sizes (rows) for BenchmarkNodeMemory")
var nodememLake = flag.String("nodemem.lake", "", "a lake folder the demo tables were already written into (retrain data demo --data-dir DIR) with the one size in -nodemem.rows and -nodemem.days: staged and promoted there, not rewritten")
var nodememDays = flag.Int("nodemem.days", 10, "days the demo rows of BenchmarkNodeMemory span (the last one held out)")

// The child learns its node, store, lake and input from these.
const (
	memChildEnv = "RETRAIN_NODEMEM_CHILD"
	memStoreEnv = "RETRAIN_NODEMEM_STORE"
	memLakeEnv  = "RETRAIN_NODEMEM_LAKE"
	memInputEnv = "RETRAIN_NODEMEM_INPUT"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestMain(m *testing.M) {
	if node := os.Getenv(memChildEnv); node != "" {
		os.Exit(runMemChild(node))
	}
	os.Exit(m.Run())
}

// runMemChild runs one node in this process, as a worker's activity would,
// and writes its outputs as JSON to stdout.
func runMemChild(node string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "nodemem child:", err)
		return 1
	}
	var cfg storeConn
	var in nodetype.Input
	if err := json.Unmarshal([]byte(os.Getenv(memStoreEnv)), &cfg); err != nil {
		return fail(err)
	}
	if err := json.Unmarshal([]byte(os.Getenv(memInputEnv)), &in); err != nil {
		return fail(err)
	}
	ctx := context.Background()
	st, err := s3store.Open(ctx, s3store.Config{URI: cfg.URI, Endpoint: cfg.Endpoint, Region: cfg.Region, UsePathStyle: true,
		AccessKeyID: cfg.AccessKeyID, SecretAccessKey: cfg.SecretAccessKey})
	if err != nil {
		return fail(err)
	}
	var typ nodetype.Type
	switch node {
	case "split":
		lz := lake.NewLazy(lake.Config{DataDir: os.Getenv(memLakeEnv)}, quietLog)
		defer lz.Close()
		typ = split.Type(split.Deps{Catalog: lz, Store: st, Logger: quietLog})
	case "train":
		typ = train.Type(train.Deps{Store: st, Logger: quietLog})
	case "evaluate":
		typ = evaluate.Type(st, quietLog)
	default:
		return fail(fmt.Errorf("unknown node %q", node))
	}
	res, err := runActivity(in, typ)
	if err != nil {
		return fail(err)
	}
	peak, err := peakRSS()
	if err != nil {
		return fail(err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(childResult{Outputs: res.Outputs, PeakKiB: peak}); err != nil {
		return fail(err)
	}
	return 0
}

// runActivity runs a node as a worker does: an activity of a workflow,
// here the SDK's test workflow environment, with the start-to-close
// timeout of a large table's training (the test activity environment
// fixes 10 minutes).
func runActivity(in nodetype.Input, typ nodetype.Type) (nodetype.Result, error) {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(sdklog.NewStructuredLogger(quietLog))
	env := s.NewTestWorkflowEnvironment()
	env.SetTestTimeout(nodeTimeout)
	env.RegisterActivityWithOptions(nodetype.Activity(typ.Run), activity.RegisterOptions{Name: in.Type})
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context, in nodetype.Input) (nodetype.Result, error) {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: nodeTimeout, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
		})
		var res nodetype.Result
		err := workflow.ExecuteActivity(ctx, in.Type, in).Get(ctx, &res)
		return res, err
	}, workflow.RegisterOptions{Name: "node"})
	env.ExecuteWorkflow("node", in)
	if err := env.GetWorkflowError(); err != nil {
		return nodetype.Result{}, err
	}
	var res nodetype.Result
	err := env.GetWorkflowResult(&res)
	return res, err
}

// nodeTimeout bounds one node of the benchmark.
const nodeTimeout = 3 * time.Hour

// childResult is what a child writes to stdout.
type childResult struct {
	Outputs map[string]any `json:"outputs"`
	PeakKiB int64          `json:"peak_kib"`
}

// peakRSS is this process's peak resident set size (VmHWM), in KiB. Not
// getrusage's maxrss of the child: Linux carries the high-water mark of
// the address space exec replaced over into it, so a child started by a
// parent holding a large table would report the parent's peak.
func peakRSS() (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		}
	}
	return 0, errors.New("no VmHWM in /proc/self/status")
}

// storeConn is what the child needs of the store's s3store.Config (which
// holds a func, so does not marshal whole).
type storeConn struct {
	URI, Endpoint, Region        string
	AccessKeyID, SecretAccessKey string
}

// nodeRun is one node's child process: its wall time and peak RSS.
type nodeRun struct {
	wall    time.Duration
	cpu     time.Duration // user + system of the child: steadier than wall on a shared machine
	peakKiB int64
	outputs map[string]any
}

// runNode runs a node in a child process and measures it.
func runNode(b *testing.B, node string, store s3store.Config, lakeDir string, in nodetype.Input) nodeRun {
	b.Helper()
	cfg, err := json.Marshal(storeConn{URI: store.URI, Endpoint: store.Endpoint, Region: store.Region,
		AccessKeyID: store.AccessKeyID, SecretAccessKey: store.SecretAccessKey})
	if err != nil {
		b.Fatal(err)
	}
	input, _ := json.Marshal(in)
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), memChildEnv+"="+node, memStoreEnv+"="+string(cfg), memLakeEnv+"="+lakeDir, memInputEnv+"="+string(input))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	started := time.Now()
	if err := cmd.Run(); err != nil {
		b.Fatalf("%s: %v\n%s", node, err, stderr.String())
	}
	var res childResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		b.Fatalf("%s: outputs: %v\n%s", node, err, stdout.String())
	}
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return nodeRun{wall: time.Since(started), cpu: cpu, peakKiB: res.PeakKiB, outputs: res.Outputs}
}

// prepareTable writes rows demo rows over days into a lake in dir and
// stages and promotes the user and ad features into ml.training, as
// ctr-retrain's first nodes do; it returns the promoted snapshot.
func prepareTable(b *testing.B, dir string, rows int64, days int) (string, time.Duration) {
	b.Helper()
	ctx := context.Background()
	started := time.Now()
	lz := lake.NewLazy(lake.Config{DataDir: dir}, quietLog)
	defer lz.Close()
	cat, err := lz.Catalog(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if *nodememLake == "" {
		cfg := demodata.Config{Rows: rows, Days: days}
		if _, err := demodata.Write(ctx, cat, cfg, demodata.DefaultTables, false, quietLog); err != nil {
			b.Fatal(err)
		}
	}
	start, end := demodata.DefaultStart.String(), (demodata.DefaultStart + backfill.Day(days-1)).String()
	var staging []string
	for _, spec := range ctrStages(start, end) {
		st, err := features.Stage(ctx, cat, spec, quietLog)
		if err != nil {
			b.Fatal(err)
		}
		staging = append(staging, st.Staging)
	}
	pr, err := features.Promote(ctx, cat, features.PromoteSpec{Training: "ml.training", Staging: staging, StartDate: start, EndDate: end}, "nodemem", 2, quietLog)
	if err != nil {
		b.Fatal(err)
	}
	// The children's figures are their own, but the machine's memory is
	// shared: give back what staging and promoting held.
	debug.FreeOSMemory()
	return strconv.FormatInt(pr.Snapshot, 10), time.Since(started)
}

// BenchmarkNodeMemory measures the peak RSS and time of ctr-retrain's
// split, train and evaluate nodes, each in its own process, on demo tables
// of each size in -nodemem.rows, and prints the ratio of each node's peak
// between the largest and the smallest table: about 1 when the node's
// memory is bounded, about the size ratio when it holds the table.
//
//	go test ./internal/devkit/bench/ -run '^$' -bench NodeMemory -benchtime 1x -nodemem.rows 200000,2000000
func BenchmarkNodeMemory(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("reads each node's peak RSS from /proc/self/status")
	}
	var sizes []int64
	for _, s := range strings.Split(*nodememRows, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || n < 1000 {
			b.Fatalf("-nodemem.rows %q: want sizes of at least 1000 rows", *nodememRows)
		}
		sizes = append(sizes, n)
	}
	nodes := []string{"split", "train", "evaluate"}
	peaks := map[int64]map[string]int64{}
	for range b.N {
		srv := s3test.Start(b)
		for i, rows := range sizes {
			dir := *nodememLake
			if dir == "" {
				dir = b.TempDir()
			} else if len(sizes) > 1 {
				b.Fatal("-nodemem.lake holds one table: give one size in -nodemem.rows")
			}
			snap, prep := prepareTable(b, dir, rows, *nodememDays)
			store := srv.Config(fmt.Sprintf("size%d", i))
			start, end := demodata.DefaultStart.String(), (demodata.DefaultStart + backfill.Day(*nodememDays-1)).String()
			run := fmt.Sprintf("rows-%d", rows)
			in := func(node string, with map[string]any) nodetype.Input {
				return nodetype.Input{Pipeline: "nodemem", RunID: run, Node: node, Type: node, With: with}
			}
			sp := runNode(b, "split", store, dir, in("split", ctrSplit(snap, start, end, nil)))
			tr := runNode(b, "train", store, dir, in("train", map[string]any{
				"data": sp.outputs["uri"], "epochs": 2, "dim": 8, "batch_size": 1024, "seed": 1, "checkpoint_every": 20,
				"transforms": map[string]any{"u_activity": "log", "u_ctr_7d": "logit", "u_sessions": "log1p", "ad_ctr_7d": "logit", "ad_age_days": "log1p"},
			}))
			ev := runNode(b, "evaluate", store, dir, in("evaluate", map[string]any{
				"candidate": tr.outputs["model_uri"], "data": sp.outputs["uri"], "slices": true,
			}))
			peaks[rows] = map[string]int64{}
			fmt.Printf("nodemem: %d rows over %d days (%d train, %d eval): tables written, staged and promoted in %s\n",
				rows, *nodememDays, int64(sp.outputs["train_rows"].(float64)), int64(sp.outputs["eval_rows"].(float64)), prep.Round(time.Second))
			for j, r := range []nodeRun{sp, tr, ev} {
				peaks[rows][nodes[j]] = r.peakKiB
				fmt.Printf("nodemem:   %-8s %8.1f s  peak RSS %7.1f MiB\n", nodes[j], r.wall.Seconds(), float64(r.peakKiB)/1024)
				b.ReportMetric(float64(r.peakKiB)/1024, fmt.Sprintf("%s-%d-MiB", nodes[j], rows))
			}
			fmt.Printf("nodemem:   evaluate: AUC %v, log loss %v\n", ev.outputs["auc"], ev.outputs["log_loss"])
		}
	}
	if len(sizes) < 2 {
		return
	}
	lo, hi := sizes[0], sizes[len(sizes)-1]
	for _, n := range nodes {
		fmt.Printf("nodemem: %s peak RSS at %d rows / at %d rows: %.2f (table %.0fx)\n", n, hi, lo,
			float64(peaks[hi][n])/float64(peaks[lo][n]), float64(hi)/float64(lo))
	}
}

// ctrStages are ctr-retrain's two stage_features nodes over start..end:
// user features previous_day with prefix u_, ad features as_of.
func ctrStages(start, end string) []features.StageSpec {
	return []features.StageSpec{
		{Training: "ml.training", Feature: "features.user_daily", Keys: []string{"user_id"}, StartDate: start, EndDate: end,
			Alignment: "previous_day", Features: []string{"activity", "ctr_7d", "sessions", "recency_days", "recent_ads"}, Prefix: "u_"},
		{Training: "ml.training", Feature: "features.ad_daily", Keys: []string{"ad_id"}, StartDate: start, EndDate: end, Alignment: "as_of"},
	}
}

// ctrSplit is the with block of ctr-retrain's split of ml.training at
// snapshot snap over start..end, joining join's staging tables (none when
// nil) as a feature experiment's split does.
func ctrSplit(snap, start, end string, join []any) map[string]any {
	w := map[string]any{
		"table": "ml.training", "snapshot_id": snap, "start_date": start, "end_date": end, "eval_days": 1,
		"dense":  []any{"u_activity", "u_ctr_7d", "u_sessions", "u_recency_days", "ad_quality", "ad_ctr_7d", "ad_age_days"},
		"sparse": []any{"user_id", "ad_id", "u_recent_ads"}, "slice": "date",
	}
	if join != nil {
		w["join"] = join
	}
	return w
}
