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

// supersedeEnv runs the Canary workflow (two baked steps of an hour, then
// 100%) with a start that returns plan and a production check that
// returns check from the given step on; it records the traffic sent and
// the decisions taken.
type supersedeEnv struct {
	traffic []Split
	decided []StepInput
	checks  int
	res     nodetype.Result
	err     error
}

func runSupersede(t *testing.T, edit func(*Plan), check ProductionCheck, fromCheck int, decided Decided) *supersedeEnv {
	t.Helper()
	checks, err := canary.ParseChecks([]any{map[string]any{"name": "errors", "query": "q", "max": 0.5}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	plan := Plan{Spec: canary.Spec{Steps: []canary.Step{{Percent: 10, Bake: time.Hour}, {Percent: 50, Bake: time.Hour}, {Percent: 100}},
		Checks: checks, Interval: 10 * time.Minute, PrometheusURL: "http://prometheus:9090"}, Model: "ctr", Version: "v3",
		Alias: "canary", ProductionAlias: "production", Production: "v5", LogicalDate: "2026-11-26"}
	if edit != nil {
		edit(&plan)
	}
	e := &supersedeEnv{}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(Canary, workflow.RegisterOptions{Name: Workflow})
	reg := func(name string, fn any) { env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name}) }
	reg(StartActivity, func(context.Context, nodetype.Input) (Plan, error) { return plan, nil })
	reg(TrafficActivity, func(_ context.Context, s StepInput) (WebhookCalls, error) {
		e.traffic = append(e.traffic, s.Split)
		return WebhookCalls{}, nil
	})
	reg(EvaluateActivity, func(context.Context, StepInput) ([]canary.Sample, error) {
		v := 0.1
		return []canary.Sample{{Time: time.Now(), Canary: &v}}, nil
	})
	reg(DecideActivity, func(_ context.Context, s StepInput) (Decided, error) {
		e.decided = append(e.decided, s)
		return decided, nil
	})
	reg(SeriesActivity, func(context.Context, StepInput) ([]RangeSeries, error) { return nil, nil })
	reg(ProductionActivity, func(context.Context, StepInput) (ProductionCheck, error) {
		e.checks++
		if e.checks >= fromCheck {
			return check, nil
		}
		return ProductionCheck{Now: plan.Production}, nil
	})
	env.ExecuteWorkflow(Workflow, nodetype.Input{Pipeline: "p", RunID: "r", Node: "canary", Type: Name})
	e.err = env.GetWorkflowError()
	if e.err == nil {
		e.err = env.GetWorkflowResult(&e.res)
	}
	return e
}

// TestCanarySupersededAtStart: a start that found the candidate older
// than production ends the canary at once: succeeded, superseded, no
// traffic, no decision, no check.
func TestCanarySupersededAtStart(t *testing.T) {
	e := runSupersede(t, func(p *Plan) {
		p.SupersededBy, p.SupersededDate, p.Superseded = "v5", "2026-11-28", "production of ctr names v5, trained for 2026-11-28: ..."
	}, ProductionCheck{}, 1, Decided{})
	if e.err != nil {
		t.Fatal(e.err)
	}
	o := e.res.Outputs
	if len(e.traffic) != 0 || len(e.decided) != 0 || e.checks != 0 {
		t.Fatalf("traffic %v, decisions %d, checks %d: want none", e.traffic, len(e.decided), e.checks)
	}
	if o["decision"] != Superseded || o["moved"] != false || o["superseded_by"] != "v5" || o["superseded_date"] != "2026-11-28" {
		t.Fatalf("outputs %v", o)
	}
	if s, _ := o["summary"].(string); s != "ctr production left at v5: superseded by v5 for 2026-11-28 (v3 registered, for 2026-11-26; no traffic sent)" {
		t.Errorf("summary %q", s)
	}
}

// TestCanarySupersededWhileBaking: production moved to a newer date
// during step 1: at step 2 no more traffic goes to the candidate, the
// canary is rolled back (0%), and the node succeeds superseded.
func TestCanarySupersededWhileBaking(t *testing.T) {
	e := runSupersede(t, nil, ProductionCheck{Now: "v7", Moved: true, Superseded: "production moved from v5 to v7, trained for 2026-11-29, while the canary baked",
		SupersededBy: "v7", SupersededDate: "2026-11-29"}, 1, Decided{})
	if e.err != nil {
		t.Fatal(e.err)
	}
	if len(e.traffic) != 1 || e.traffic[0].Percent != 10 {
		t.Errorf("traffic %v, want 10%% only", e.traffic)
	}
	if len(e.decided) != 1 || e.decided[0].Promote || e.decided[0].Split.Percent != 0 {
		t.Fatalf("decided %+v, want one rollback to 0%%", e.decided)
	}
	o := e.res.Outputs
	if o["decision"] != Superseded || o["moved"] != false || o["superseded_by"] != "v7" {
		t.Fatalf("outputs %v", o)
	}
	if s, _ := o["summary"].(string); s != "ctr production left at v7: superseded by v7 for 2026-11-29 (v3 registered, for 2026-11-26; canary rolled back)" {
		t.Errorf("summary %q", s)
	}
}

// TestCanaryProductionMovedAtStep: production moved (not to a newer date)
// before the last step: rolled back at once and refused, as the
// promotion's compare-and-swap would at the end.
func TestCanaryProductionMovedAtStep(t *testing.T) {
	e := runSupersede(t, nil, ProductionCheck{Now: "v4", Moved: true}, 2, Decided{})
	if e.err == nil {
		t.Fatal("a canary whose production moved succeeded")
	}
	if len(e.traffic) != 2 || len(e.decided) != 1 || e.decided[0].Promote {
		t.Fatalf("traffic %v, decided %+v: want 10%%, 50%%, then a rollback", e.traffic, e.decided)
	}
	if e.checks != 2 {
		t.Errorf("production checked %d times, want at steps 2 and 3", e.checks)
	}
}

// TestCanaryPromotionSuperseded: the decide activity found production
// newer at the promotion itself: superseded, succeeded, not moved.
func TestCanaryPromotionSuperseded(t *testing.T) {
	e := runSupersede(t, nil, ProductionCheck{}, 99, Decided{Refused: "moved", ProductionCheck: ProductionCheck{Now: "v7", Moved: true,
		Superseded: "production moved to v7, newer", SupersededBy: "v7", SupersededDate: "2026-11-29"}})
	if e.err != nil {
		t.Fatal(e.err)
	}
	if o := e.res.Outputs; o["decision"] != Superseded || o["moved"] != false || o["superseded_by"] != "v7" {
		t.Fatalf("outputs %v", o)
	}
}
