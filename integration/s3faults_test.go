package integration

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/dags/examples"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/devkit/s3fault"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/internal/storage"
	"github.com/retrain-ml/retrain/metrics"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/worker"
)

// The S3 fault suites: ctr-retrain on the demo data with the
// worker's object store behind s3fault's proxy, while the test itself
// reads the store directly. Loopback only, and every wait is bounded.

// retryLog collects the store's retry events of a fault suite's worker.
type retryLog struct {
	mu       sync.Mutex
	byReason map[string]int
	byOp     map[string]int
}

func (l *retryLog) add(ev s3store.RetryEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byReason == nil {
		l.byReason, l.byOp = map[string]int{}, map[string]int{}
	}
	l.byReason[ev.Reason]++
	l.byOp[ev.Operation]++
}

func (l *retryLog) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.byReason {
		n += c
	}
	return n
}

func (l *retryLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("by reason %v, by operation %v", l.byReason, l.byOp)
}

// faultWorker starts, on e's queue, a worker whose object store is reached
// through p with maxAttempts per request (0: the store's default),
// serving metrics on a free port; it logs its warnings (the store's
// retries among them) to the test's output. When lp is not nil, e's lake
// has its warehouse on e's S3 server, and the worker reaches that through
// lp, with the same attempts, its retries going to lakeRetries.
func faultWorker(t *testing.T, e *retrainEnv, p *s3fault.Proxy, retries *retryLog, maxAttempts int, lp *s3fault.Proxy, lakeRetries *retryLog) *worker.Worker {
	t.Helper()
	s3cfg := e.srv.Config("")
	s3cfg.Endpoint = p.URL()
	s3cfg.MaxAttempts = maxAttempts
	s3cfg.OnRetry = retries.add
	lakeCfg := e.lakeCfg
	if lp != nil {
		lakeCfg.S3.Endpoint = lp.URL()
		lakeCfg.S3.MaxAttempts = maxAttempts
		// Waits of at most 100 ms: the lake reads Parquet with a ranged GET
		// per column chunk (thousands per run), and the test is of what is
		// retried and counted, not of the patience (10 s waits) that the
		// outage suite tests on the store.
		lakeCfg.S3.MaxBackoff = 100 * time.Millisecond
		lakeCfg.S3.OnRetry = lakeRetries.add
	}
	w, err := worker.New(context.Background(), tclient, server.Namespace(), worker.Config{
		TaskQueue: e.queue, Pipelines: examples.FS, Lake: lakeCfg,
		Store: storage.Config{S3: s3cfg}, MetricsAddr: "127.0.0.1:0",
	}, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

// newS3LakeEnv is newRetrainEnv, without a worker, with the lake's
// warehouse on the S3 server (a SQLite catalog file, as one host's
// workers share it): the demo tables are written there directly, not
// through a proxy.
func newS3LakeEnv(t *testing.T, data demodata.Config) *retrainEnv {
	t.Helper()
	e := &retrainEnv{srv: s3test.Start(t), queue: newQueue(t), data: data}
	e.lakeCfg = lake.Config{
		URI: "file:" + filepath.Join(t.TempDir(), "catalog.db"), Warehouse: e.srv.URI("warehouse"),
		S3: lake.S3Config{Endpoint: e.srv.Endpoint, Region: e.srv.Region, AccessKeyID: e.srv.AccessKey, SecretAccessKey: e.srv.SecretKey},
	}
	e.open(context.Background(), t)
	return e
}

// startProxy starts a fault proxy in front of e's S3 server.
func startProxy(t *testing.T, e *retrainEnv, cfg s3fault.Config) *s3fault.Proxy {
	t.Helper()
	cfg.Target = e.srv.Endpoint
	p, err := s3fault.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// retrainOutcome is what a ctr-retrain run must reproduce under faults.
type retrainOutcome struct {
	model string // the deployed version's artifact checksum
	table string // ml.training's data checksum after the promotion
	rows  int64
}

func outcomeOf(t *testing.T, e *retrainEnv, res *runs.Result) retrainOutcome {
	t.Helper()
	wantStatus(t, res, runs.StatusSucceeded)
	d := node(t, res, "deploy")
	sum, _ := d.Outputs["checksum"].(string)
	if d.Status != runs.NodeSucceeded || sum == "" {
		t.Fatalf("deploy %s, outputs %v", d.Status, d.Outputs)
	}
	c := e.checksum(t)
	return retrainOutcome{model: sum, table: c.Digest, rows: c.Rows}
}

// attempts lists the nodes that took more than one activity attempt, and
// the total of attempts.
func attempts(res *runs.Result) (int32, string) {
	var total int32
	var extra []string
	for _, n := range res.Nodes {
		total += n.Attempts
		if n.Attempts > 1 {
			extra = append(extra, fmt.Sprintf("%s:%d", n.ID, n.Attempts))
		}
	}
	sort.Strings(extra)
	return total, strings.Join(extra, " ")
}

// scrapedRetries is retrain_s3_retries_total as the worker exports it.
func scrapedRetries(t *testing.T, w *worker.Worker) float64 {
	t.Helper()
	fams, _ := scrape(t, "http://"+w.MetricsAddr()+"/metrics")
	return sum(fams, metrics.S3Retries, nil)
}

// TestCTRRetrainUnderS3Faults is fault suite (1): ctr-retrain with the
// worker's S3 traffic behind proxies that answer 10% of requests 503
// SlowDown and reset 2% of connections succeeds, and deploys a model with
// the same checksum, from a training table with the same checksum, as a
// fault-free run with the same seed on a fresh stack with a local-disk
// lake. Both of the worker's S3 clients are behind a proxy of their own:
// the object store (checkpoints, models) and the lake's table IO (its
// warehouse is on the S3 server too, so staging, promotion and split
// read and write the tables through faults). Every SlowDown is a
// counted SDK retry, of the client it was injected into, and the worker
// exports the retries of both in retrain_s3_retries_total.
//
// The short form runs both on half the demo rows (fewer table reads, the
// same faults at the same rates); the long form on retrainData's.
func TestCTRRetrainUnderS3Faults(t *testing.T) {
	parallelFor(t, 70*time.Second)
	data := retrainData
	if !longTests(t) {
		data.Rows /= 2
	}
	t.Logf("demo data: %d rows over %d days", data.Rows, data.Days)
	clean := newRetrainEnvData(t, true, data)
	began := time.Now()
	cleanRes := clean.run(t, nil)
	want := outcomeOf(t, clean, cleanRes)
	t.Logf("fault-free run (local-disk lake) in %.1f s: model %s, ml.training %s (%d rows)", time.Since(began).Seconds(), want.model, want.table, want.rows)

	e := newS3LakeEnv(t, data)
	p := startProxy(t, e, s3fault.Config{Seed: 12, SlowDownRate: 0.10, ResetRate: 0.02})
	lp := startProxy(t, e, s3fault.Config{Seed: 13, SlowDownRate: 0.10, ResetRate: 0.02})
	retries, lakeRetries := &retryLog{}, &retryLog{}
	w := faultWorker(t, e, p, retries, 0, lp, lakeRetries)
	began = time.Now()
	res := e.run(t, nil)
	took := time.Since(began)
	got := outcomeOf(t, e, res)
	t.Logf("run under faults (lake on S3) in %.1f s", took.Seconds())

	total, extra := attempts(res)
	exported := scrapedRetries(t, w)
	t.Logf("store proxy: %v", p.Stats())
	t.Logf("store SDK retries counted: %d (%v)", retries.total(), retries)
	t.Logf("lake proxy: %v", lp.Stats())
	t.Logf("lake SDK retries counted: %d (%v)", lakeRetries.total(), lakeRetries)
	t.Logf("retrain_s3_retries_total %v", exported)
	t.Logf("activity attempts: %d over %d nodes; more than one: [%s]", total, len(res.Nodes), extra)
	t.Logf("model checksum %s (fault-free %s); ml.training %s, %d rows (fault-free %s, %d rows)", got.model, want.model, got.table, got.rows, want.table, want.rows)

	if got != want {
		t.Fatalf("under faults the run produced %+v, fault-free %+v", got, want)
	}
	for _, c := range []struct {
		name    string
		stats   s3fault.Stats
		retries *retryLog
	}{{"store", p.Stats(), retries}, {"lake", lp.Stats(), lakeRetries}} {
		if c.stats.SlowDowns == 0 {
			t.Fatalf("the %s's proxy injected too little to test anything: %v", c.name, c.stats)
		}
		// A 503 always reaches the SDK; a reset of a read on a reused
		// connection may be resent by net/http itself (s3fault.Stats).
		n := int64(c.retries.total())
		c.retries.mu.Lock()
		throttled := int64(c.retries.byReason[s3store.RetryThrottled])
		c.retries.mu.Unlock()
		if throttled != c.stats.SlowDowns || n < c.stats.SlowDowns+c.stats.Resets-c.stats.ResetReads || n > c.stats.SlowDowns+c.stats.Resets {
			t.Errorf("%s: %d SDK retries, %d of them throttled, for %d SlowDowns and %d resets (%d of reads)", c.name, n, throttled, c.stats.SlowDowns, c.stats.Resets, c.stats.ResetReads)
		}
	}
	if p.Stats().Resets == 0 {
		t.Errorf("the store's proxy reset no connection: %v", p.Stats())
	}
	if n := retries.total() + lakeRetries.total(); exported != float64(n) {
		t.Errorf("retrain_s3_retries_total = %v; store and lake counted %d", exported, n)
	}
}

// TestCTRRetrainSurvivesS3Outage is fault suite (3): the worker's S3
// endpoint refuses connections for 30 s once training has written its
// first checkpoint; the store's requests are retried through the outage
// and the run succeeds with no step retried by Temporal.
//
// The SDK's retries are what survive it: the nodes' retry policy (the
// built-in default, which ctr-retrain states again: 3 attempts, 1 s then
// 2 s apart) gives an S3 request that keeps failing about 3 s more, while
// the store's 10 attempts wait at least 30 s before the sixth. The
// control subtest shows it: the same outage with the SDK's default of 3
// attempts fails the run.
//
// The short form has one outage of 12 s: still four times what the nodes'
// retries cover, and survived by the store's retries all the same. The
// long form has the 30 s outage and the control run.
func TestCTRRetrainSurvivesS3Outage(t *testing.T) {
	parallelFor(t, 45*time.Second)
	long := longTests(t)
	outage := 12 * time.Second
	if long {
		outage = 30 * time.Second
	}
	o := runThroughOutage(t, outage, 0)
	res := o.res
	got := outcomeOf(t, o.env, res)
	total, extra := attempts(res)
	t.Logf("deployed model checksum %s, ml.training %s (%d rows)", got.model, got.table, got.rows)
	if o.ended < outage {
		t.Errorf("the run ended %v into a %v outage", o.ended, outage)
	}
	if o.refused == 0 || o.exported != float64(o.retries.total()) {
		t.Errorf("%d retries of refused connections, %d retries counted, %v exported; want some, and the same exported", o.refused, o.retries.total(), o.exported)
	}
	if extra != "" {
		t.Errorf("%d activity attempts, more than one for [%s]: the store's retries did not absorb the outage", total, extra)
	}

	if !long {
		t.Logf("short form: no control run (3 SDK attempts through the outage)")
		return
	}
	t.Run("control: 3 SDK attempts do not survive it", func(t *testing.T) {
		o := runThroughOutage(t, outage, 3)
		if o.res.Status != runs.StatusFailed {
			t.Fatalf("run %s with 3 attempts per S3 request through a %v outage; want failed", o.res.Status, outage)
		}
		for _, n := range o.res.Nodes {
			if n.Status == runs.NodeFailed {
				t.Logf("%s failed after %d attempts: %s", n.ID, n.Attempts, n.Error)
			}
		}
	})
}

// outageRun is what runThroughOutage saw.
type outageRun struct {
	env      *retrainEnv
	res      *runs.Result
	ended    time.Duration // from the outage's start to the run's end
	retries  *retryLog
	refused  int // retries of requests that got no answer
	exported float64
}

// runThroughOutage starts ctr-retrain on a fresh stack whose worker
// reaches S3 through a proxy (maxAttempts per request, 0 for the store's
// default), and makes the proxy refuse connections for outage once
// training has written its first checkpoint.
func runThroughOutage(t *testing.T, outage time.Duration, maxAttempts int) outageRun {
	t.Helper()
	e := newRetrainEnv(t, false)
	p := startProxy(t, e, s3fault.Config{})
	retries := &retryLog{}
	w := faultWorker(t, e, p, retries, maxAttempts, nil, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	run, err := runs.Start(ctx, tclient, runs.Request{Pipeline: "ctr-retrain", TaskQueue: e.queue,
		Params: map[string]any{"start_date": retrainStart, "end_date": retrainEnd}})
	if err != nil {
		t.Fatal(err)
	}
	// Training has begun once its first checkpoint is in the store.
	prefix := "checkpoints/ctr-retrain/" + run.ID + "/train/"
	waitFor(t, 2*time.Minute, func() bool {
		for range e.store.List(ctx, prefix) {
			return true
		}
		return false
	})
	if err := p.Outage(outage); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	desc, err := tclient.DescribeWorkflowExecution(ctx, run.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if st := desc.GetWorkflowExecutionInfo().GetStatus().String(); st != "Running" {
		t.Fatalf("the run was %s before the outage began", st)
	}
	res, err := runs.Wait(ctx, tclient, run.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := outageRun{env: e, res: res, ended: time.Since(began), retries: retries}
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	o.exported = scrapedRetries(t, w)
	retries.mu.Lock()
	o.refused = retries.byReason[s3store.RetryConnection]
	retries.mu.Unlock()
	total, extra := attempts(res)
	t.Logf("outage of %v began with training under way; the run ended %s %v later", outage, res.Status, o.ended.Round(time.Millisecond))
	t.Logf("proxy: %v", p.Stats())
	t.Logf("SDK retries counted: %d (%v); retrain_s3_retries_total %v", retries.total(), retries, o.exported)
	t.Logf("activity attempts: %d over %d nodes; more than one: [%s]", total, len(res.Nodes), extra)
	return o
}
