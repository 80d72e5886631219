package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/nodetype"
	"github.com/retrain-ml/retrain/runs"
)

// stepType is a node type whose behaviour the spec controls:
//
//	fail: N        fail the first N attempts
//	permanent: true fail without retry
//	sleep_ms: N    take N ms
//
// and whose outputs are its `with` block, so references can be checked.
var stepType = dags.NodeType{Name: "step", OpenWith: true}

// harness runs Pipeline in the test suite with the step type registered.
type harness struct {
	testsuite.WorkflowTestSuite
	t        *testing.T
	mu       sync.Mutex
	order    []string // node ids in the order their final attempt ran
	running  atomic.Int32
	maxInFly atomic.Int32
	types    []dags.NodeType // registered next to step, run by the same activity
	dryRun   bool            // runs.PipelineInput.DryRun
	reuse    *runs.Reuse     // runs.PipelineInput.Reuse (rerun_test.go)
	source   *runs.Reuse     // what LoadReuseActivity answers for source.Run
	gone     map[string]string
	verified []string          // nodes VerifyReuseActivity was asked about
	zones    map[string]string // node id -> the Timezone its input carried
}

func (h *harness) step(ctx context.Context, in nodetype.Input) (map[string]any, error) {
	n := h.running.Add(1)
	defer h.running.Add(-1)
	for {
		m := h.maxInFly.Load()
		if n <= m || h.maxInFly.CompareAndSwap(m, n) {
			break
		}
	}
	if ms, ok := in.With["sleep_ms"].(float64); ok {
		time.Sleep(time.Duration(ms) * time.Millisecond)
	}
	attempt := activity.GetInfo(ctx).Attempt
	if in.With["permanent"] == true {
		return nil, temporal.NewNonRetryableApplicationError("broken for good", "Broken", nil)
	}
	if fail, ok := in.With["fail"].(float64); ok && float64(attempt) <= fail {
		return nil, fmt.Errorf("flaky failure on attempt %d", attempt)
	}
	h.mu.Lock()
	h.order = append(h.order, in.Node)
	if h.zones == nil {
		h.zones = map[string]string{}
	}
	h.zones[in.Node] = in.Timezone
	h.mu.Unlock()
	return in.With, nil
}

func (h *harness) run(spec string, params map[string]any, lib fstest.MapFS) (*runs.Result, error) {
	env := h.NewTestWorkflowEnvironment()
	reg, err := dags.NewRegistry(append([]dags.NodeType{stepType}, h.types...)...)
	if err != nil {
		h.t.Fatal(err)
	}
	resolver := &Resolver{AllowInlineSpecs: true, Registry: reg}
	if lib != nil {
		resolver.Library = dags.NewLibrary(lib)
	}
	Register(env)
	env.RegisterActivityWithOptions(resolver.Resolve, activity.RegisterOptions{Name: runs.ResolveActivity})
	env.RegisterActivityWithOptions(nodetype.Activity(h.step), activity.RegisterOptions{Name: "step"})
	for _, t := range h.types {
		env.RegisterActivityWithOptions(nodetype.Activity(h.step), activity.RegisterOptions{Name: t.Name})
	}
	env.RegisterActivityWithOptions(func(_ context.Context, checks []runs.ReuseCheck) (runs.ReuseVerdict, error) {
		v := runs.ReuseVerdict{Gone: map[string]string{}}
		for _, c := range checks {
			h.verified = append(h.verified, c.Node)
			if why, ok := h.gone[c.Node]; ok {
				v.Gone[c.Node] = why
			}
		}
		return v, nil
	}, activity.RegisterOptions{Name: runs.VerifyReuseActivity})
	env.RegisterActivityWithOptions(func(_ context.Context, run string) (*runs.Reuse, error) {
		if h.source == nil || h.source.Run != run {
			return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("rerun: run %q does not exist", run), "InvalidPipeline", nil)
		}
		return h.source, nil
	}, activity.RegisterOptions{Name: runs.LoadReuseActivity})
	in := runs.PipelineInput{Params: params, DryRun: h.dryRun, Reuse: h.reuse}
	if lib != nil {
		in.Pipeline = spec
	} else {
		b, _ := json.Marshal(spec)
		in.Spec, in.SpecFile = b, "test.yaml"
	}
	env.ExecuteWorkflow(runs.PipelineWorkflow, in)
	if !env.IsWorkflowCompleted() {
		h.t.Fatal("workflow did not complete")
	}
	var res runs.Result
	if err := env.GetWorkflowResult(&res); err != nil {
		return nil, err
	}
	return &res, nil
}

func newHarness(t *testing.T) *harness {
	h := &harness{t: t}
	h.SetLogger(nopLogger{})
	return h
}

// succeed runs a spec and fails the test unless the run succeeded.
func (h *harness) succeed(spec string, params map[string]any, lib fstest.MapFS) *runs.Result {
	t := h.t
	t.Helper()
	res, err := h.run(spec, params, lib)
	if err != nil {
		t.Fatalf("run failed: %v", err)
	}
	if res.Status != runs.StatusSucceeded {
		t.Fatalf("status %s, want succeeded: %s", res.Status, res.Error)
	}
	return res
}

func mustFail(t *testing.T, err error) *runs.Result {
	t.Helper()
	if err == nil {
		t.Fatal("run succeeded, want failure")
	}
	res, ok := runs.ResultFromError(err)
	if !ok {
		t.Fatalf("failure carries no runs.Result: %v", err)
	}
	if res.Status != runs.StatusFailed {
		t.Fatalf("status %s, want failed", res.Status)
	}
	return res
}

func wantNode(t *testing.T, res *runs.Result, id string, status runs.NodeStatus, attempts int32) *runs.NodeState {
	t.Helper()
	n := res.Node(id)
	if n == nil {
		t.Fatalf("no node %s in result", id)
	}
	if n.Status != status {
		t.Fatalf("node %s: status %s, want %s (error %q, reason %q)", id, n.Status, status, n.Error, n.Reason)
	}
	if attempts >= 0 && n.Attempts != attempts {
		t.Fatalf("node %s: attempts %d, want %d", id, n.Attempts, attempts)
	}
	return n
}

func TestPipelinePassesOutputsAndParams(t *testing.T) {
	h := newHarness(t)
	res := h.succeed(`
name: pass
params:
  date: {type: string, default: "2026-01-01"}
  n: {type: int, default: 1}
nodes:
  - {id: a, type: step, with: {uri: "s3://b/x", rows: 42}}
  - {id: b, type: step, needs: [a], with: {msg: "${params.date} ${nodes.a.outputs.uri}", rows: "${nodes.a.outputs.rows}", n: "${params.n}"}}
`, map[string]any{"n": "7"}, nil)
	b := wantNode(t, res, "b", runs.NodeSucceeded, 1)
	if b.Outputs["msg"] != "2026-01-01 s3://b/x" {
		t.Errorf("msg = %v", b.Outputs["msg"])
	}
	if b.Outputs["rows"] != float64(42) { // a whole reference keeps its type
		t.Errorf("rows = %#v, want 42", b.Outputs["rows"])
	}
	if b.Outputs["n"] != float64(7) {
		t.Errorf("n = %#v, want 7 (the --param string converted to the declared int)", b.Outputs["n"])
	}
	if res.ParamsDigest == "" || res.Params["date"] != "2026-01-01" {
		t.Errorf("params not reported: %v %q", res.Params, res.ParamsDigest)
	}
	if b.StartedAt == nil || b.EndedAt == nil || b.ScheduledAt == nil {
		t.Errorf("times missing: %+v", b)
	}
}

func TestPipelineRetriesCountAttempts(t *testing.T) {
	h := newHarness(t)
	res := h.succeed(`
name: flaky
defaults: {retry: {max_attempts: 3, initial_interval: 1s}}
nodes:
  - {id: flaky, type: step, with: {fail: 2}}
`, nil, nil)
	wantNode(t, res, "flaky", runs.NodeSucceeded, 3)
}

func TestPipelineFailureStopsSchedulingAndReportsAttempts(t *testing.T) {
	h := newHarness(t)
	_, err := h.run(`
name: fails
defaults: {retry: {max_attempts: 2, initial_interval: 1s}}
nodes:
  - {id: bad, type: step, with: {fail: 5}}
  - {id: slow, type: step, with: {sleep_ms: 50}}
  - {id: after_bad, type: step, needs: [bad]}
  - {id: after_slow, type: step, needs: [slow]}
`, nil, nil)
	res := mustFail(t, err)
	bad := wantNode(t, res, "bad", runs.NodeFailed, 2)
	if !strings.Contains(bad.Error, "flaky failure on attempt 2") {
		t.Errorf("bad.Error = %q", bad.Error)
	}
	wantNode(t, res, "slow", runs.NodeSucceeded, 1) // already running: finishes
	wantNode(t, res, "after_bad", runs.NodeCancelled, 0)
	if !strings.Contains(res.Error, "node bad") {
		t.Errorf("run error %q does not name the node", res.Error)
	}
	// after_slow may have been scheduled before bad's final failure only if
	// slow finished first; either way it is never left pending.
	if n := res.Node("after_slow"); n.Status == runs.NodePending || n.Status == runs.NodeRunning {
		t.Errorf("after_slow left %s", n.Status)
	}
}

func TestPipelinePermanentErrorIsNotRetried(t *testing.T) {
	h := newHarness(t)
	_, err := h.run(`
name: permanent
defaults: {retry: {max_attempts: 5}}
nodes:
  - {id: a, type: step, with: {permanent: true}}
`, nil, nil)
	res := mustFail(t, err)
	a := wantNode(t, res, "a", runs.NodeFailed, 1)
	// The type is said once: the activity's error carries the step's own
	// as its cause, whose text repeats it (it used to read "... (type:
	// Broken, retryable: false) (type: Broken, retryable: false)").
	const want = "broken for good (type: Broken, retryable: false)"
	if a.Error != want {
		t.Errorf("node error %q, want %q", a.Error, want)
	}
	if res.Error != "node a: "+want {
		t.Errorf("run error %q, want %q", res.Error, "node a: "+want)
	}
}

func TestPipelineWhenFalseSkipsSubtree(t *testing.T) {
	h := newHarness(t)
	res := h.succeed(`
name: when
nodes:
  - {id: a, type: step, with: {code: 1}}
  - {id: gated, type: step, needs: [a], when: "${nodes.a.outputs.code} == 0"}
  - {id: child, type: step, needs: [gated]}
  - {id: grandchild, type: step, needs: [child, a]}
  - {id: other, type: step, needs: [a], when: "${nodes.a.outputs.code} != 0 && true"}
`, nil, nil)
	wantNode(t, res, "gated", runs.NodeSkipped, 0)
	wantNode(t, res, "child", runs.NodeSkipped, 0)
	wantNode(t, res, "grandchild", runs.NodeSkipped, 0)
	wantNode(t, res, "other", runs.NodeSucceeded, 1)
	for _, id := range h.order {
		if id == "gated" || id == "child" || id == "grandchild" {
			t.Errorf("skipped node %s ran", id)
		}
	}
}

func TestPipelineParallelismBound(t *testing.T) {
	h := newHarness(t)
	h.succeed(`
name: bounded
parallelism: 2
nodes:
  - {id: a, type: step, with: {sleep_ms: 30}}
  - {id: b, type: step, with: {sleep_ms: 30}}
  - {id: c, type: step, with: {sleep_ms: 30}}
  - {id: d, type: step, with: {sleep_ms: 30}}
  - {id: e, type: step, with: {sleep_ms: 30}}
`, nil, nil)
	if got := h.maxInFly.Load(); got > 2 {
		t.Errorf("%d nodes ran at once, parallelism is 2", got)
	}
	if len(h.order) != 5 {
		t.Errorf("ran %v", h.order)
	}
}

func TestPipelineCompensatesInReverseCompletionOrder(t *testing.T) {
	h := newHarness(t)
	_, err := h.run(`
name: compensate
nodes:
  - {id: first, type: step, with: {snapshot: 11}}
  - {id: second, type: step, needs: [first], with: {snapshot: 22}}
  - {id: never, type: step, needs: [first]}
  - {id: boom, type: step, needs: [second], with: {permanent: true}}
on_failure:
  - {id: undo_first, type: step, compensates: first, with: {to: "${nodes.first.outputs.snapshot}"}}
  - {id: undo_second, type: step, compensates: second, with: {to: "${nodes.second.outputs.snapshot}"}}
  - {id: undo_boom, type: step, compensates: boom}
`, nil, nil)
	res := mustFail(t, err)
	var ids []string
	for _, c := range res.Compensations {
		ids = append(ids, c.ID)
		if c.Status != runs.NodeSucceeded {
			t.Errorf("compensation %s: %s %s", c.ID, c.Status, c.Error)
		}
	}
	// never's position in completion order depends on scheduling; undo the
	// nodes that completed, newest first, and nothing for the failed one.
	if got := strings.Join(ids, ","); got != "undo_second,undo_first" {
		t.Errorf("compensations ran as %s, want undo_second,undo_first", got)
	}
	if c := res.Compensations[0]; c.Outputs["to"] != float64(22) || c.Compensates != "second" {
		t.Errorf("undo_second = %+v", c)
	}
}

func TestPipelineInvalidSpecFailsBeforeAnyNode(t *testing.T) {
	h := newHarness(t)
	_, err := h.run(`
name: cyclic
nodes:
  - {id: a, type: step, needs: [b]}
  - {id: b, type: step, needs: [a]}
`, nil, nil)
	if err == nil {
		t.Fatal("cyclic spec ran")
	}
	if !strings.Contains(err.Error(), "a -> b -> a") && !strings.Contains(err.Error(), "b -> a -> b") {
		t.Errorf("error does not print the cycle: %v", err)
	}
	if len(h.order) != 0 {
		t.Errorf("nodes ran: %v", h.order)
	}
}

func TestPipelineByNameFromLibrary(t *testing.T) {
	h := newHarness(t)
	lib := fstest.MapFS{
		"hello.yaml": {Data: []byte("name: hello\nparams: {who: {type: string, default: you}}\nnodes:\n  - {id: a, type: step, with: {msg: \"hi ${params.who}\"}}\n")},
	}
	res := h.succeed("hello", map[string]any{"who": "ml"}, lib)
	if got := wantNode(t, res, "a", runs.NodeSucceeded, 1).Outputs["msg"]; got != "hi ml" {
		t.Errorf("msg = %v", got)
	}
	_, err := h.run("nope", nil, lib)
	if err == nil || !strings.Contains(err.Error(), "hello") {
		t.Errorf("unknown pipeline error should list the known ones: %v", err)
	}
}

// TestPipelineDryRun: a dry run resolves and validates the pipeline and
// its params on the worker and ends without running a node (what
// `retrain schedule apply` asks of the queue's workers).
func TestPipelineDryRun(t *testing.T) {
	h := newHarness(t)
	h.dryRun = true
	lib := fstest.MapFS{
		"hello.yaml": {Data: []byte("name: hello\nparams: {who: {type: string}}\nnodes:\n  - {id: a, type: step, with: {msg: \"hi ${params.who}\"}}\n")},
	}
	res := h.succeed("hello", map[string]any{"who": "ml"}, lib)
	if !res.DryRun || len(res.Nodes) != 1 || res.Nodes[0].Status != runs.NodePending || len(h.order) != 0 {
		t.Fatalf("dry run: %+v, ran %v", res, h.order)
	}
	for _, c := range []struct {
		pipeline string
		params   map[string]any
		want     string
	}{
		{"nope", map[string]any{"who": "ml"}, `pipeline "nope" not found`},
		{"hello", nil, `missing required param "who"`},
	} {
		if _, err := h.run(c.pipeline, c.params, lib); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("dry run of %s %v: %v, want an error about %q", c.pipeline, c.params, err, c.want)
		}
	}
	if len(h.order) != 0 {
		t.Errorf("nodes ran: %v", h.order)
	}
}

func TestPipelineStateQueryWhileRunning(t *testing.T) {
	h := newHarness(t)
	env := h.NewTestWorkflowEnvironment()
	reg, _ := dags.NewRegistry(stepType)
	Register(env)
	env.RegisterActivityWithOptions((&Resolver{AllowInlineSpecs: true, Registry: reg}).Resolve, activity.RegisterOptions{Name: runs.ResolveActivity})
	release := make(chan struct{})
	env.RegisterActivityWithOptions(nodetype.Activity(func(ctx context.Context, in nodetype.Input) (map[string]any, error) {
		if in.Node == "b" {
			<-release
		}
		return nil, nil
	}), activity.RegisterOptions{Name: "step"})
	var seen *runs.Result
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(runs.StateQuery)
		if err != nil {
			t.Errorf("query: %v", err)
		} else {
			seen = &runs.Result{}
			if err := v.Get(seen); err != nil {
				t.Error(err)
			}
		}
		close(release)
	}, time.Second)
	spec, _ := json.Marshal("name: q\nnodes:\n  - {id: a, type: step}\n  - {id: b, type: step, needs: [a]}\n  - {id: c, type: step, needs: [b]}\n")
	env.ExecuteWorkflow(runs.PipelineWorkflow, runs.PipelineInput{Spec: spec})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if seen == nil {
		t.Fatal("query never answered")
	}
	if seen.Status != runs.StatusRunning {
		t.Errorf("status %s", seen.Status)
	}
	wantNode(t, seen, "a", runs.NodeSucceeded, 1)
	wantNode(t, seen, "b", runs.NodeRunning, 0)
	wantNode(t, seen, "c", runs.NodePending, 0)
}

func TestResultFromErrorIgnoresOtherErrors(t *testing.T) {
	if _, ok := runs.ResultFromError(errors.New("plain")); ok {
		t.Error("plain error yielded a result")
	}
	if _, ok := runs.ResultFromError(temporal.NewApplicationError("x", "Other")); ok {
		t.Error("other application error yielded a result")
	}
}

type nopLogger struct{}

func (nopLogger) Debug(string, ...any) {}
func (nopLogger) Info(string, ...any)  {}
func (nopLogger) Warn(string, ...any)  {}
func (nopLogger) Error(string, ...any) {}

// TestProgressSurvivesLivenessHeartbeats checks a retry reads back the
// progress the failed attempt recorded, although the wrapper kept sending
// liveness heartbeats after it.
func TestProgressSurvivesLivenessHeartbeats(t *testing.T) {
	h := newHarness(t)
	env := h.NewTestWorkflowEnvironment()
	reg, _ := dags.NewRegistry(stepType)
	Register(env)
	env.RegisterActivityWithOptions((&Resolver{AllowInlineSpecs: true, Registry: reg}).Resolve, activity.RegisterOptions{Name: runs.ResolveActivity})
	env.RegisterActivityWithOptions(nodetype.Activity(func(ctx context.Context, in nodetype.Input) (map[string]any, error) {
		if activity.GetInfo(ctx).Attempt == 1 {
			nodetype.RecordProgress(ctx, "step-42")
			time.Sleep(400 * time.Millisecond) // several liveness heartbeats
			return nil, errors.New("crash after progress")
		}
		var resumed string
		if activity.HasHeartbeatDetails(ctx) {
			_ = activity.GetHeartbeatDetails(ctx, &resumed)
		}
		return map[string]any{"resumed": resumed}, nil
	}), activity.RegisterOptions{Name: "step"})
	spec, _ := json.Marshal("name: hb\nnodes:\n  - {id: a, type: step, heartbeat: 300ms, retry: {max_attempts: 2, initial_interval: 10ms}}\n")
	env.ExecuteWorkflow(runs.PipelineWorkflow, runs.PipelineInput{Spec: spec})
	var res runs.Result
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if got := wantNode(t, &res, "a", runs.NodeSucceeded, 2).Outputs["resumed"]; got != "step-42" {
		t.Errorf("retry resumed from %q, want step-42", got)
	}
}

// NewTestWorkflowEnvironment is the suite's, with the SDK's deadlock
// detector relaxed from 1 s to a minute: on a loaded 2-core CI machine a
// workflow task of these tests can be descheduled for over a second, which
// the detector reports as a deadlock though nothing is blocked. Real
// workers keep the SDK's default.
func (h *harness) NewTestWorkflowEnvironment() *testsuite.TestWorkflowEnvironment {
	env := h.WorkflowTestSuite.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: time.Minute})
	return env
}
