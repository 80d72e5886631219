package gate

import (
	"encoding/json"
	"strings"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/activities/noop"
	"github.com/retrain-ml/retrain/nodetype"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/workflows"
)

// runPipeline runs spec through the pipeline workflow with the noop and
// gate types registered as the worker registers them, and returns the
// run's result, or its error.
func runPipeline(t *testing.T, spec string) (*runs.Result, error) {
	t.Helper()
	types := append(Types(nil), noop.Type())
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(nodetest.Quiet))
	env := s.NewTestWorkflowEnvironment()
	workflows.Register(env)
	env.RegisterActivityWithOptions((&workflows.Resolver{AllowInlineSpecs: true, Registry: nodetest.Registry(t, types...)}).Resolve,
		activity.RegisterOptions{Name: runs.ResolveActivity})
	for _, typ := range types {
		if typ.Workflow != nil {
			env.RegisterWorkflowWithOptions(typ.Workflow, workflow.RegisterOptions{Name: typ.TargetName()})
			continue
		}
		env.RegisterActivityWithOptions(nodetype.Activity(typ.Run), activity.RegisterOptions{Name: typ.TargetName()})
	}
	b, _ := json.Marshal(spec)
	env.ExecuteWorkflow(runs.PipelineWorkflow, runs.PipelineInput{Spec: b, SpecFile: "anynode.yaml"})
	if !env.IsWorkflowCompleted() {
		t.Fatal("workflow did not complete")
	}
	var res runs.Result
	if err := env.GetWorkflowResult(&res); err != nil {
		return nil, err
	}
	return &res, nil
}

// TestGateOnMetricsFromAnyNode: candidate and baseline take the metrics of
// any upstream node, not only an evaluate node's: a map output referenced
// whole, or a map of references to single figures. The run validates and
// gates on those figures.
func TestGateOnMetricsFromAnyNode(t *testing.T) {
	tests := []struct {
		name, spec string
		passed     bool
		reason     string
	}{
		{"map outputs", `
name: anynode
nodes:
  - {id: score, type: noop, with: {metrics: {auc: 0.8}, id: cand-9}}
  - {id: prod, type: noop, with: {metrics: {auc: 0.75}, version: v3}}
  - id: gate
    type: gate
    needs: [score, prod]
    with:
      candidate: ${nodes.score.outputs.metrics}
      candidate_id: ${nodes.score.outputs.id}
      baseline: ${nodes.prod.outputs.metrics}
      baseline_version: ${nodes.prod.outputs.version}
      metrics: {auc: {direction: higher_is_better, min: 0.7, min_absolute_change: 0.01}}
`, true, "all 2 checks passed"},
		{"figures of a noop's outputs", `
name: anynode
nodes:
  - {id: cand, type: noop, with: {auc: 0.8}}
  - {id: base, type: noop, with: {auc: 0.75}}
  - id: gate
    type: gate
    needs: [cand, base]
    with:
      candidate: {auc: "${nodes.cand.outputs.auc}"}
      baseline: {auc: "${nodes.base.outputs.auc}"}
      metrics: {auc: {direction: higher_is_better, min_absolute_change: 0.01}}
`, true, "all 1 checks passed"},
		{"the same figures, a threshold they miss", `
name: anynode
nodes:
  - {id: cand, type: noop, with: {auc: 0.8}}
  - {id: base, type: noop, with: {auc: 0.75}}
  - id: gate
    type: gate
    needs: [cand, base]
    with:
      candidate: {auc: "${nodes.cand.outputs.auc}"}
      baseline: {auc: "${nodes.base.outputs.auc}"}
      metrics: {auc: {direction: lower_is_better, min_absolute_change: 0}}
`, false, "auc improvement -0.05"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := runPipeline(t, tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			g := res.Node("gate")
			if g == nil || g.Outputs["passed"] != tt.passed || g.Outputs["has_baseline"] != true {
				t.Fatalf("gate %+v", g)
			}
			if reason, _ := g.Outputs["reason"].(string); !strings.Contains(reason, tt.reason) {
				t.Errorf("reason %q, want %q", reason, tt.reason)
			}
			cs, _ := g.Outputs["comparisons"].([]any)
			last, _ := cs[len(cs)-1].(map[string]any)
			if last["check"] != "min_absolute_change" || last["candidate"] != 0.8 || last["baseline"] != 0.75 {
				t.Errorf("comparison %v", last)
			}
			if tt.name == "map outputs" && (g.Outputs["candidate_id"] != "cand-9" || g.Outputs["baseline_version"] != "v3") {
				t.Errorf("outputs %v", g.Outputs)
			}
		})
	}
}

// TestOldThresholdKeysRefusedAtRunTime: a spec with absolute or relative
// fails before any node runs (the resolver validates it), with the message
// that gives the new setting.
func TestOldThresholdKeysRefusedAtRunTime(t *testing.T) {
	_, err := runPipeline(t, `
name: old
nodes:
  - {id: cand, type: noop, with: {metrics: {log_loss: 0.3}}}
  - id: gate
    type: gate
    needs: [cand]
    with:
      candidate: ${nodes.cand.outputs.metrics}
      metrics: {log_loss: {direction: lower_is_better, absolute: -1}}
`)
	if err == nil || !strings.Contains(err.Error(), `metric log_loss: "absolute" is no longer accepted`) ||
		!strings.Contains(err.Error(), "Write min_absolute_change: -1 ") {
		t.Fatalf("error %v", err)
	}
}
