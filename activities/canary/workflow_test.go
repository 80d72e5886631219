package canary

import (
	"context"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/internal/canary"
	"github.com/retrain-ml/retrain/nodetype"
)

// fakeCanary runs the Canary workflow on Temporal's test environment
// (timers skip ahead) with activities that say what it asked for: a
// healthy canary of an hour at 10%, then 100%.
func fakeCanary(t *testing.T, during func(env *testsuite.TestWorkflowEnvironment)) (*testsuite.TestWorkflowEnvironment, *[]StepInput) {
	t.Helper()
	checks, err := canary.ParseChecks([]any{map[string]any{"name": "errors", "query": "q", "max": 0.5}})
	if err != nil {
		t.Fatal(err)
	}
	plan := Plan{Spec: canary.Spec{Steps: []canary.Step{{Percent: 10, Bake: time.Hour}, {Percent: 100}}, Checks: checks,
		Interval: time.Minute, PrometheusURL: "http://prometheus:9090"}, Model: "ctr", Version: "v2", Alias: "canary",
		ProductionAlias: "production", Production: "v1"}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(Canary, workflow.RegisterOptions{Name: Workflow})
	reg := func(name string, fn any) { env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name}) }
	reg(StartActivity, func(context.Context, nodetype.Input) (Plan, error) { return plan, nil })
	reg(TrafficActivity, func(context.Context, StepInput) (WebhookCalls, error) { return WebhookCalls{}, nil })
	reg(EvaluateActivity, func(context.Context, StepInput) ([]canary.Sample, error) {
		v := 0.1
		return []canary.Sample{{Time: time.Now(), Canary: &v}}, nil
	})
	var decided []StepInput
	reg(DecideActivity, func(_ context.Context, s StepInput) (Decided, error) {
		decided = append(decided, s)
		return Decided{}, nil
	})
	reg(SeriesActivity, func(context.Context, StepInput) ([]RangeSeries, error) { return nil, nil })
	during(env)
	env.ExecuteWorkflow(Workflow, nodetype.Input{Pipeline: "p", RunID: "r", Node: "canary", Type: Name})
	return env, &decided
}

// TestCanaryApprovalSignal: an approval by signal 5 minutes into an hour's
// bake promotes at once, once.
func TestCanaryApprovalSignal(t *testing.T) {
	env, decided := fakeCanary(t, func(env *testsuite.TestWorkflowEnvironment) {
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(ApproveName, Approval{By: "alice", Reason: "looks fine"}) }, 5*time.Minute)
	})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res nodetype.Result
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if len(*decided) != 1 || !(*decided)[0].Promote || res.Outputs["decision"] != Approved || res.Outputs["decided_by"] != "alice" {
		t.Fatalf("decided %+v, outputs %v", *decided, res.Outputs)
	}
}

// TestCanaryCancelledRollsBack: a run cancelled mid-bake rolls the
// canary back rather than leave it serving its share.
func TestCanaryCancelledRollsBack(t *testing.T) {
	env, decided := fakeCanary(t, func(env *testsuite.TestWorkflowEnvironment) {
		env.RegisterDelayedCallback(env.CancelWorkflow, 10*time.Minute)
	})
	if env.GetWorkflowError() == nil {
		t.Fatal("a cancelled canary succeeded")
	}
	if len(*decided) != 1 || (*decided)[0].Promote {
		t.Fatalf("decided %+v, want one rollback", *decided)
	}
}

// TestCanaryHealthyPromotedOnce: an hour's bake checked every minute
// promotes once at the end.
func TestCanaryHealthyPromotedOnce(t *testing.T) {
	env, decided := fakeCanary(t, func(*testsuite.TestWorkflowEnvironment) {})
	var res nodetype.Result
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	steps, _ := res.Outputs["steps"].([]any)
	if len(*decided) != 1 || !(*decided)[0].Promote || res.Outputs["decision"] != Promoted || len(steps) != 2 {
		t.Fatalf("decided %+v, outputs %v", *decided, res.Outputs)
	}
	if c := steps[0].(map[string]any)["checks"].([]any)[0].(map[string]any); c["samples"] != 60.0 {
		t.Errorf("step 1 checked %v times, want 60 (an hour every minute)", c["samples"])
	}
}
