// Package integration drives retrain end to end: a real Temporal server
// (the embedded dev stack, in this process), real clients and workers,
// real commands. Nothing here is faked.
package integration

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/dags/examples"
	"github.com/retrain-ml/retrain/internal/devkit/devstack"
	"github.com/retrain-ml/retrain/internal/devkit/devstack/s3server"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/internal/storage"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/temporalconn"
	"github.com/retrain-ml/retrain/worker"
)

// The stack every test in this package shares. Tests isolate themselves by
// task queue, not by server: starting a server per test would dominate the
// run time on a 2-core machine.
var (
	server  *devstack.Server
	tclient client.Client
	quiet   = slog.New(slog.NewTextHandler(io.Discard, nil))
	queues  atomic.Int64
)

// childWorkerEnv makes the test binary act as a worker process, so a test
// can SIGKILL a worker without killing itself.
const childWorkerEnv = "RETRAIN_IT_CHILD_WORKER"

// childLakeEnv is the data dir of the lake a child worker uses, if any.
const childLakeEnv = "RETRAIN_IT_LAKE_DIR"

func TestMain(m *testing.M) {
	tuneGC()
	s3server.Main() // the dev stack's S3 server, started again by a `retrain dev` of runAsProgram
	if runAsProgram() {
		return
	}
	if queue := os.Getenv(childWorkerEnv); queue != "" {
		os.Exit(runChildWorker(queue))
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	flag.Parse()
	defaultParallel()
	// One thread a PyTorch rank, unless the caller says otherwise: the
	// package's ranks share a small machine with each other and with the
	// tests beside them, and a rank with a thread per core (PyTorch's
	// default for a host's only rank) oversubscribed it. The PyTorch tests
	// took about 11% less CPU and 7% less time with 1.
	if os.Getenv("OMP_NUM_THREADS") == "" {
		if err := os.Setenv("OMP_NUM_THREADS", "1"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "retrain-it-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = filepath.Join(dir, "bin")
	server, err = devstack.Start(ctx, devstack.Options{
		DataDir:          dir,
		SearchAttributes: runs.SearchAttributes(),
		Logger:           quiet,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start dev stack:", err)
		return 1
	}
	defer server.Stop()
	conn := temporalconn.Options{Address: server.FrontendAddress(), Namespace: server.Namespace()}
	tclient, err = conn.Dial(ctx, quiet)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer tclient.Close()
	return m.Run()
}

// tuneGC collects garbage less often in this binary, in every role it
// runs (the tests with the embedded server and workers, a child worker,
// `retrain` or `retrain-worker`) unless GOGC or GOMEMLIMIT is set. The
// package is bound by CPU on 2 cores, and most of the test process's CPU
// is the Go runtime allocating and collecting for the server and the
// workers: at GOGC=400 the in-process tests took 12-25% less CPU. The
// memory limit makes the collector work harder again before the heap
// gets large.
func tuneGC() {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetGCPercent(400)
	debug.SetMemoryLimit(3 << 30)
}

// testParallel is how many of this package's parallel tests run at once
// when -parallel is not given. go test's default is GOMAXPROCS, 2 on a
// 2-core machine, but the tests marked parallel spend most of their time
// waiting (canary bakes, heartbeat timeouts after a kill, S3 outages, gang
// formation, schedules firing), not computing: on a quiet 2-core machine
// the package used about three quarters of its CPU with 6. Tests whose
// figures depend on the machine being quiet (timings, scaling) stay
// sequential.
const testParallel = 8

// defaultParallel sizes the package's own queue of parallel tests
// (parallel_test.go) to -parallel if the command line set it, else to
// max(testParallel, GOMAXPROCS), and lifts go test's own limit out of its
// way: the queue admits tests longest first, go test in no set order.
func defaultParallel() {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	limit := max(testParallel, runtime.GOMAXPROCS(0))
	if set {
		if n, err := strconv.Atoi(flag.Lookup("test.parallel").Value.String()); err == nil && n > 0 {
			limit = n
		}
	}
	testSlots.limit = limit
	_ = flag.Set("test.parallel", "10000")
}

// longTestsEnv set to 1 runs the long forms of the fault and soak tests
// (more rounds, longer outages): .ci/run sets it. Without it, as in a plain
// `go test ./...`, they run fewer rounds of the same cases, so the package
// stays well inside go test's default 10-minute timeout.
const longTestsEnv = "RETRAIN_LONG_TESTS"

// longTests says whether to run the long form, and logs which form ran.
func longTests(t *testing.T) bool {
	t.Helper()
	if os.Getenv(longTestsEnv) == "1" {
		t.Logf("long form (%s=1)", longTestsEnv)
		return true
	}
	t.Logf("short form: %s=1 runs the long form, as .ci/run does", longTestsEnv)
	return false
}

// runChildWorker is the body of a worker child process.
func runChildWorker(queue string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	conn := temporalconn.Options{Address: os.Getenv("RETRAIN_TEMPORAL_ADDRESS"), Namespace: os.Getenv("RETRAIN_NAMESPACE")}
	c, err := conn.Dial(ctx, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	w, err := worker.New(ctx, c, conn.Namespace, worker.Config{
		TaskQueue: queue, Pipelines: examples.FS, Store: storage.FromEnv(), AllowInlineSpecs: true,
		Lake: lake.Config{DataDir: os.Getenv(childLakeEnv)}, // empty: no lake
		Env:  progenv.Policy{PassEnv: testPassEnv},
		// A child worker on a queue of its own may run the nodes of runs
		// on the queues a test names (the lake tests send half a run's
		// nodes to it).
		TrustedQueues: trustedQueues(queue),
	}, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// trustedQueues are the queues whose runs a child worker on queue takes
// nodes from: its own and those in RETRAIN_TRUSTED_QUEUES.
func trustedQueues(queue string) []string {
	qs := []string{queue}
	if v := os.Getenv(worker.EnvTrustedQueues); v != "" {
		qs = append(qs, strings.Split(v, ",")...)
	}
	return qs
}

// testPassEnv are the test process's variables that test workers pass on
// to the programs steps start (--pass-env): PYTHONDONTWRITEBYTECODE keeps
// __pycache__ out of examples/torch, and OMP_NUM_THREADS (runTests sets 1)
// keeps each PyTorch rank to one thread.
var testPassEnv = []string{"PYTHONDONTWRITEBYTECODE", "OMP_NUM_THREADS"}

// newQueue returns a task queue no other test uses.
func newQueue(t *testing.T) string {
	return fmt.Sprintf("it-%s-%d", strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")), queues.Add(1))
}

// startWorker runs an in-process worker on queue until the test ends.
func startWorker(t *testing.T, queue string) {
	t.Helper()
	startWorkerWith(t, worker.Config{TaskQueue: queue})
}

// startWorkerWith runs an in-process worker with cfg (a lake, a store)
// until the test ends, and returns it (its MetricsAddr). It knows the
// example pipelines unless cfg says otherwise.
func startWorkerWith(t *testing.T, cfg worker.Config, opts ...worker.Option) *worker.Worker {
	t.Helper()
	return startWorkerOn(t, tclient, server.Namespace(), cfg, opts...)
}

// startWorkerOn is startWorkerWith on another server's client c and
// namespace ns (a stack of the test's own: ownStack).
func startWorkerOn(t *testing.T, c client.Client, ns string, cfg worker.Config, opts ...worker.Option) *worker.Worker {
	t.Helper()
	if cfg.Pipelines == nil && cfg.PipelinesDir == "" {
		cfg.Pipelines = examples.FS
	}
	// Test workers are dev-style: most tests send their spec inline.
	// policy_test.go starts the refusing kind itself.
	cfg.AllowInlineSpecs = true
	cfg.Env.PassEnv = append(cfg.Env.PassEnv, testPassEnv...)
	w, err := worker.New(context.Background(), c, ns, cfg, quiet, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

// ownStack starts a dev stack (headless) for t alone, stopped when t ends,
// and a client of it. The package's tests share one server, whose SQLite
// has one connection and one history shard: a test that floods it with
// thousands of activities or signals would queue every other test's
// calls behind its own.
func ownStack(t *testing.T) (*devstack.Server, client.Client) {
	t.Helper()
	stack, err := devstack.Start(context.Background(), devstack.Options{
		DataDir: t.TempDir(), Headless: true, SearchAttributes: runs.SearchAttributes(), Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stack.Stop() })
	conn := temporalconn.Options{Address: stack.FrontendAddress(), Namespace: stack.Namespace()}
	c, err := conn.Dial(context.Background(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return stack, c
}

// runSpec starts a spec on queue and waits for its result.
func runSpec(t *testing.T, queue, spec string, params map[string]any) *runs.Result {
	t.Helper()
	return runRequest(t, runs.Request{Spec: []byte(spec), SpecFile: t.Name() + ".yaml", Params: params, TaskQueue: queue}, 2*time.Minute)
}

// runRequest starts a run and waits, at most limit, for its result.
func runRequest(t *testing.T, req runs.Request, limit time.Duration) *runs.Result {
	t.Helper()
	return runRequestOn(t, tclient, req, limit)
}

// runRequestOn is runRequest on another server's client c.
func runRequestOn(t *testing.T, c client.Client, req runs.Request, limit time.Duration) *runs.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	run, err := runs.Start(ctx, c, req)
	if err != nil {
		t.Fatal(err)
	}
	res, err := runs.Wait(ctx, c, run.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func node(t *testing.T, res *runs.Result, id string) *runs.NodeState {
	t.Helper()
	n := res.Node(id)
	if n == nil {
		t.Fatalf("no node %s in result", id)
	}
	return n
}

func wantStatus(t *testing.T, res *runs.Result, want runs.Status) {
	t.Helper()
	if res.Status != want {
		t.Fatalf("run status %s, want %s: %s", res.Status, want, res.Error)
	}
}

// childStoreEnv is the environment that points a child worker process,
// which takes its store from the environment as retrain-worker does, at
// srv (for startChildWorker: the test process's own environment stays as
// it is, so tests that start child workers can run in parallel).
func childStoreEnv(srv *s3test.Server) []string {
	return []string{
		"RETRAIN_S3_URI=" + srv.URI(""),
		"RETRAIN_S3_ENDPOINT=" + srv.Endpoint,
		"AWS_ACCESS_KEY_ID=" + srv.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + srv.SecretKey,
		"AWS_REGION=" + srv.Region,
		"AWS_EC2_METADATA_DISABLED=true",
	}
}
