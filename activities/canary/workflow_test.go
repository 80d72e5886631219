package canary

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	approvalnode "github.com/retrain-ml/retrain/activities/approval"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/internal/approval"
	"github.com/retrain-ml/retrain/internal/canary"
	"github.com/retrain-ml/retrain/nodetype"
)

// fake is a canary on Temporal's test environment (timers skip ahead)
// whose activities say what it asked for.
type fake struct {
	steps  []canary.Step
	checks []any
	set    canary.Settings
	// value is the check's value at an evaluation, by how long after the
	// first split it ran; nil is no data; an error fails the evaluation.
	value   func(since time.Duration) (*float64, error)
	timeout time.Duration // the node's (the run timeout); 0: none
	during  func(env *testsuite.TestWorkflowEnvironment)
	// approvers is the worker's approvers list (the zero one: none).
	approvers approval.Approvers

	env     *testsuite.TestWorkflowEnvironment
	decided []StepInput
	splits  []float64
	evals   int
}

func num(v float64) *float64 { return &v }

func (f *fake) run(t *testing.T) (nodetype.Result, error) {
	t.Helper()
	if f.steps == nil {
		f.steps = []canary.Step{{Percent: 10, Bake: time.Hour}, {Percent: 100}}
	}
	if f.checks == nil {
		f.checks = []any{map[string]any{"name": "errors", "query": "q", "max": 0.5}}
	}
	if f.set.Interval == "" {
		f.set.Interval = "1m"
	}
	f.set.PrometheusURL = "http://prometheus:9090"
	var steps []any
	for _, s := range f.steps {
		m := map[string]any{"percent": s.Percent}
		if s.Bake > 0 {
			m["bake"] = s.Bake.String()
		}
		if s.Warmup > 0 {
			m["warmup"] = s.Warmup.String()
		}
		steps = append(steps, m)
	}
	spec, err := canary.ParseSpec(steps, f.checks, f.set)
	if err != nil {
		t.Fatal(err)
	}
	if f.value == nil {
		f.value = func(time.Duration) (*float64, error) { return num(0.1), nil }
	}
	plan := Plan{Spec: spec, Model: "ctr", Version: "v2", Alias: "canary", ProductionAlias: "production", Production: "v1"}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	f.env = env
	env.RegisterWorkflowWithOptions(Canary, workflow.RegisterOptions{Name: Workflow})
	reg := func(name string, fn any) { env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name}) }
	var first time.Time
	reg(StartActivity, func(context.Context, nodetype.Input) (Plan, error) { return plan, nil })
	reg(TrafficActivity, func(_ context.Context, s StepInput) (WebhookCalls, error) {
		if first.IsZero() {
			first = env.Now()
		}
		f.splits = append(f.splits, s.Split.Percent)
		return WebhookCalls{}, nil
	})
	reg(EvaluateActivity, func(context.Context, StepInput) ([]canary.Sample, error) {
		f.evals++
		v, err := f.value(env.Now().Sub(first))
		if err != nil {
			return nil, err
		}
		out := make([]canary.Sample, len(spec.Checks))
		for i := range out {
			out[i] = canary.Sample{Time: env.Now(), Canary: v}
		}
		return out, nil
	})
	reg(DecideActivity, func(_ context.Context, s StepInput) (Decided, error) {
		f.decided = append(f.decided, s)
		return Decided{}, nil
	})
	reg(SeriesActivity, func(context.Context, StepInput) ([]RangeSeries, error) { return nil, nil })
	reg(VerifyActivity, (&approvalnode.Activities{Approvers: f.approvers, Now: env.Now}).Verify)
	if f.during != nil {
		f.during(env)
	}
	in := nodetype.Input{Pipeline: "p", RunID: "r", Node: "canary", Type: Name}
	if f.timeout > 0 {
		env.SetWorkflowRunTimeout(f.timeout)
		in.Options = &nodetype.Options{Timeout: f.timeout, Heartbeat: 30 * time.Second, Retry: dags.RetryPolicy{MaxAttempts: 1}}
	}
	env.ExecuteWorkflow(Workflow, in)
	if err := env.GetWorkflowError(); err != nil {
		return nodetype.Result{}, err
	}
	var res nodetype.Result
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	return res, nil
}

// outputs are a canary's outputs, from its result or its error's details.
func outputs(t *testing.T, res nodetype.Result, err error) map[string]any {
	t.Helper()
	if err == nil {
		return res.Outputs
	}
	var out map[string]any
	var ae interface{ Details(...any) error }
	if !errors.As(err, &ae) || ae.Details(&out) != nil {
		t.Fatalf("error without outputs: %v", err)
	}
	return out
}

func (f *fake) wantDecision(t *testing.T, res nodetype.Result, err error, decision string, promote bool) map[string]any {
	t.Helper()
	out := outputs(t, res, err)
	if out["decision"] != decision || len(f.decided) != 1 || f.decided[0].Promote != promote {
		t.Fatalf("decision %v (reason %v), decided %+v; want %s once, promote %v", out["decision"], out["reason"], f.decided, decision, promote)
	}
	return out
}

// TestCanaryApprovalSignal: an approval by signal 5 minutes into an hour's
// bake promotes at once, once.
func TestCanaryApprovalSignal(t *testing.T) {
	f := &fake{during: func(env *testsuite.TestWorkflowEnvironment) {
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(ApproveName, Approval{By: "alice", Reason: "looks fine"}) }, 5*time.Minute)
	}}
	res, err := f.run(t)
	out := f.wantDecision(t, res, err, Approved, true)
	// The worker has no approvers list: the name is what the sender claims.
	if out["decided_by"] != "claimed by alice" || !strings.HasPrefix(out["reason"].(string), "approved, claimed by alice: looks fine") {
		t.Fatalf("outputs %v", out)
	}
	if strings.Contains(out["summary"].(string), "approved by alice") || !strings.Contains(f.decided[0].Reason, "claimed by alice") {
		t.Fatalf("summary %q, alias history reason %q", out["summary"], f.decided[0].Reason)
	}
}

// listed returns an approvers list naming alice with key.
func listed(t *testing.T, key string) approval.Approvers {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, approval.Dir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, approval.Dir, "alice"), []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	return approval.Approvers{SecretsDir: dir}
}

// signedBy is a canary decision by alice signed with key, for the test
// environment's workflow execution.
func signedBy(env *testsuite.TestWorkflowEnvironment, key, decision string) Approval {
	r := approval.Stamp([]byte(key), approval.Request{Workflow: "default-test-workflow-id", Execution: "default-test-run-id",
		Decision: decision, By: "alice", Reason: "looks fine"}, env.Now())
	return Approval{By: r.By, Reason: r.Reason, At: r.At, Signature: r.Signature}
}

// TestCanaryApprovalVerified: with an approvers list, a forged, unsigned
// or unknown decision is refused (the canary keeps baking and says why),
// and alice's signed one promotes, recorded as hers.
func TestCanaryApprovalVerified(t *testing.T) {
	const key = "alice-key-0123456789abcdef0123456789"
	f := &fake{approvers: listed(t, key), during: func(env *testsuite.TestWorkflowEnvironment) {
		env.RegisterDelayedCallback(func() {
			env.SignalWorkflow(ApproveName, Approval{By: "alice (head of ML platform)", Reason: "ship it"})
		}, 2*time.Minute)
		env.RegisterDelayedCallback(func() {
			env.SignalWorkflow(ApproveName, signedBy(env, "not alice's key, but long enough", ApproveName))
		}, 3*time.Minute)
		env.RegisterDelayedCallback(func() {
			env.SignalWorkflow(ApproveName, signedBy(env, key, RejectName)) // her signature on another decision
		}, 4*time.Minute)
		env.RegisterDelayedCallback(func() {
			env.SignalWorkflow(ApproveName, Approval{By: "alice", Reason: "unsigned"})
		}, 5*time.Minute)
		env.RegisterDelayedCallback(func() {
			env.SignalWorkflow(ApproveName, signedBy(env, key, ApproveName))
		}, 10*time.Minute)
	}}
	res, err := f.run(t)
	out := f.wantDecision(t, res, err, Approved, true)
	if out["decided_by"] != "alice" || !strings.HasPrefix(out["reason"].(string), "approved by alice: looks fine") {
		t.Fatalf("outputs %v", out)
	}
	refused, _ := out["refused_approvals"].([]any)
	want := []string{"not an approver", "signature is not alice's", "signature is not alice's", "not signed"}
	if len(refused) != len(want) {
		t.Fatalf("refused_approvals %v, want %d", refused, len(want))
	}
	for i, w := range want {
		if s, _ := refused[i].(string); !strings.Contains(s, w) {
			t.Errorf("refusal %d %q, want it to say %q", i, s, w)
		}
	}
}

// TestCanaryForgedApprovalKeepsBaking: a forged approval changes nothing:
// the checks decide.
func TestCanaryForgedApprovalKeepsBaking(t *testing.T) {
	f := &fake{approvers: listed(t, "alice-key-0123456789abcdef0123456789"), during: func(env *testsuite.TestWorkflowEnvironment) {
		env.RegisterDelayedCallback(func() {
			env.SignalWorkflow(ApproveName, Approval{By: "alice", Reason: "ship it"})
		}, 2*time.Minute)
	}}
	res, err := f.run(t)
	out := f.wantDecision(t, res, err, Promoted, true)
	if out["decided_by"] != "checks" || len(out["refused_approvals"].([]any)) != 1 {
		t.Fatalf("outputs %v", out)
	}
}

// TestCanaryCancelledRollsBack: a run cancelled mid-bake rolls the
// canary back (0% to the candidate) rather than leave it serving its share.
func TestCanaryCancelledRollsBack(t *testing.T) {
	f := &fake{timeout: 2 * time.Hour, during: func(env *testsuite.TestWorkflowEnvironment) {
		env.RegisterDelayedCallback(env.CancelWorkflow, 10*time.Minute)
	}}
	_, err := f.run(t)
	if err == nil {
		t.Fatal("a cancelled canary succeeded")
	}
	if len(f.decided) != 1 || f.decided[0].Promote || f.decided[0].Split.Percent != 0 {
		t.Fatalf("decided %+v, want one rollback to 0%%", f.decided)
	}
}

// TestCanaryHealthyPromotedOnce: an hour's bake checked every minute
// promotes once at the end, and says what it counted.
func TestCanaryHealthyPromotedOnce(t *testing.T) {
	f := &fake{}
	res, err := f.run(t)
	out := f.wantDecision(t, res, err, Promoted, true)
	steps, _ := out["steps"].([]any)
	if len(steps) != 2 {
		t.Fatalf("steps %v", steps)
	}
	if c := steps[0].(map[string]any)["checks"].([]any)[0].(map[string]any); c["samples"] != 60.0 {
		t.Errorf("step 1 checked %v times, want 60 (an hour every minute)", c["samples"])
	}
	if r, _ := out["reason"].(string); !strings.Contains(r, "errors: 60 evaluations, 60 passed, 0 breached, 0 inconclusive") {
		t.Errorf("reason %q does not say what it counted", r)
	}
}

// TestCanarySeriesLate: the canary's series appears 10 s after the split;
// checked every 2 s with a warmup of 12 s, the canary is promoted, its
// first evaluations counted inconclusive.
func TestCanarySeriesLate(t *testing.T) {
	late := func(since time.Duration) (*float64, error) {
		if since < 10*time.Second {
			return nil, nil
		}
		return num(0.1), nil
	}
	f := &fake{steps: []canary.Step{{Percent: 10, Bake: 30 * time.Second}, {Percent: 100}}, set: canary.Settings{Interval: "2s", Warmup: "12s"}, value: late}
	res, err := f.run(t)
	out := f.wantDecision(t, res, err, Promoted, true)
	c := out["steps"].([]any)[0].(map[string]any)["checks"].([]any)[0].(map[string]any)
	if c["inconclusive"] != 4.0 || c["breaches"] != 0.0 || c["passed"] != 11.0 {
		t.Errorf("step 1's check %v: want 4 inconclusive (2-8 s), 11 passed, no breach", c)
	}
	// Without the warmup, no data past the first min_samples evaluation
	// breaches, twice in a row: rolled back.
	g := &fake{steps: f.steps, set: canary.Settings{Interval: "2s"}, value: late}
	res, err = g.run(t)
	out = g.wantDecision(t, res, err, RolledBack, false)
	b := out["breach"].(map[string]any)
	if r, _ := b["reason"].(string); !strings.Contains(r, "2 consecutive breached evaluations of failure_limit 2") || !strings.Contains(r, "no data for the canary") || len(b["evaluations"].([]any)) != 2 {
		t.Errorf("breach %v", b)
	}
}

// TestCanaryFailureLimit: under failure_limit 2, one breached evaluation
// among passes is tolerated (promoted); two in a row roll back, and the
// breach names the two evaluations it counted.
func TestCanaryFailureLimit(t *testing.T) {
	steps := []canary.Step{{Percent: 10, Bake: 20 * time.Second}, {Percent: 100}}
	set := canary.Settings{Interval: "2s", FailureLimit: 2}
	spike := func(bad ...time.Duration) func(time.Duration) (*float64, error) {
		return func(since time.Duration) (*float64, error) {
			for _, b := range bad {
				if since == b {
					return num(0.9), nil
				}
			}
			return num(0.1), nil
		}
	}
	one := &fake{steps: steps, set: set, value: spike(6 * time.Second)}
	res, err := one.run(t)
	out := one.wantDecision(t, res, err, Promoted, true)
	c := out["steps"].([]any)[0].(map[string]any)["checks"].([]any)[0].(map[string]any)
	if c["breaches"] != 1.0 || c["passed"] != 9.0 {
		t.Errorf("one breach: check %v", c)
	}
	two := &fake{steps: steps, set: set, value: spike(6*time.Second, 8*time.Second)}
	res, err = two.run(t)
	out = two.wantDecision(t, res, err, RolledBack, false)
	b := out["breach"].(map[string]any)
	evs, _ := b["evaluations"].([]any)
	if b["failure_limit"] != 2.0 || len(evs) != 2 || !strings.Contains(b["reason"].(string), "above max 0.5") {
		t.Errorf("breach %v", b)
	}
	if two.evals != 4 {
		t.Errorf("%d evaluations, want 4 (rolled back at the second breach, 8 s in)", two.evals)
	}
	// failure_limit 1 rolls back at the first breach.
	strict := &fake{steps: steps, set: canary.Settings{Interval: "2s", FailureLimit: 1}, value: spike(6 * time.Second)}
	res, err = strict.run(t)
	strict.wantDecision(t, res, err, RolledBack, false)
}

// TestCanaryEvaluationErrorsCount: a Prometheus that fails once is
// tolerated like one breach; one that stays down rolls back.
func TestCanaryEvaluationErrorsCount(t *testing.T) {
	steps := []canary.Step{{Percent: 10, Bake: 10 * time.Second}, {Percent: 100}}
	down := func(from, to time.Duration) func(time.Duration) (*float64, error) {
		return func(since time.Duration) (*float64, error) {
			if since >= from && since < to {
				return nil, errors.New("connection refused")
			}
			return num(0.1), nil
		}
	}
	once := &fake{steps: steps, set: canary.Settings{Interval: "2s"}, value: down(4*time.Second, 5*time.Second), timeout: time.Hour}
	res, err := once.run(t)
	once.wantDecision(t, res, err, Promoted, true)
	gone := &fake{steps: steps, set: canary.Settings{Interval: "2s"}, value: down(4*time.Second, time.Hour), timeout: time.Hour}
	res, err = gone.run(t)
	out := gone.wantDecision(t, res, err, RolledBack, false)
	if r, _ := out["reason"].(string); !strings.Contains(r, "could not be evaluated") || !strings.Contains(r, "connection refused") {
		t.Errorf("reason %q", r)
	}
}

// TestCanaryInconclusive: a step whose check never has enough data
// pauses; approve promotes, reject rolls back, and nobody within
// inconclusive_timeout rolls back.
func TestCanaryInconclusive(t *testing.T) {
	checks := []any{map[string]any{"name": "errors", "query": "q", "max": 0.5, "on_no_data": "ignore"}}
	steps := []canary.Step{{Percent: 10, Bake: 10 * time.Minute}, {Percent: 50, Bake: 10 * time.Minute}, {Percent: 100}}
	none := func(time.Duration) (*float64, error) { return nil, nil }
	set := canary.Settings{InconclusiveTimeout: "30m"}
	nobody := &fake{steps: steps, checks: checks, set: set, value: none}
	res, err := nobody.run(t)
	out := nobody.wantDecision(t, res, err, RolledBack, false)
	if r, _ := out["reason"].(string); !strings.Contains(r, "step 1 (10% of traffic) was inconclusive") || !strings.Contains(r, "inconclusive_timeout 30m") {
		t.Errorf("reason %q", r)
	}
	if s := out["steps"].([]any); len(s) != 1 || s[0].(map[string]any)["outcome"] != "inconclusive" {
		t.Errorf("steps %v", s)
	}
	for _, tc := range []struct {
		signal, decision string
		promote          bool
	}{{ApproveName, Approved, true}, {RejectName, Rejected, false}} {
		f := &fake{steps: steps, checks: checks, set: set, value: none}
		f.during = func(env *testsuite.TestWorkflowEnvironment) {
			env.RegisterDelayedCallback(func() {
				var st State
				v, err := env.QueryWorkflow(StateQuery)
				if err == nil {
					err = v.Get(&st)
				}
				if err != nil || st.Phase != "paused" {
					t.Errorf("15 min in: phase %q (%v), want paused", st.Phase, err)
				}
				env.SignalWorkflow(tc.signal, Approval{By: "carol", Reason: "dashboards say so"})
			}, 15*time.Minute)
		}
		res, err := f.run(t)
		f.wantDecision(t, res, err, tc.decision, tc.promote)
	}
}

// TestCanaryDeadline: a canary whose node timeout its steps cannot fit
// (slow steps pushed it) rolls back before the timeout, so that serving
// hears 0%; one whose inconclusive pause would outlast the deadline
// rolls back at the deadline.
func TestCanaryDeadline(t *testing.T) {
	steps := []canary.Step{{Percent: 10, Bake: 40 * time.Minute}, {Percent: 50, Bake: 40 * time.Minute}, {Percent: 100}}
	// 80 min of bakes in 82 min: the deadline is 82 less 5 = 77 min, so
	// step 2 (40 to 80 min) cannot end by it.
	f := &fake{steps: steps, timeout: 82 * time.Minute}
	res, err := f.run(t)
	out := f.wantDecision(t, res, err, RolledBack, false)
	if r, _ := out["reason"].(string); !strings.Contains(r, "out of time at step 2") || !strings.Contains(r, "less 5m0s kept to decide") {
		t.Errorf("reason %q", r)
	}
	if f.decided[0].Split.Percent != 0 || len(f.splits) != 1 {
		t.Errorf("splits %v then %v, want 10%% then the rollback's 0%%", f.splits, f.decided[0].Split)
	}
	checks := []any{map[string]any{"name": "errors", "query": "q", "max": 0.5, "on_no_data": "ignore"}}
	// A pause of an hour from 40 min in, with a deadline at 85 min.
	g := &fake{steps: steps[:1:1], checks: checks, timeout: 90 * time.Minute, value: func(time.Duration) (*float64, error) { return nil, nil }}
	g.steps = append(g.steps, canary.Step{Percent: 100})
	res, err = g.run(t)
	out = g.wantDecision(t, res, err, RolledBack, false)
	if r, _ := out["reason"].(string); !strings.Contains(r, "was inconclusive") || !strings.Contains(r, "its deadline") {
		t.Errorf("reason %q", r)
	}
}
