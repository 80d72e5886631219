package workflows

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"go.temporal.io/sdk/activity"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/nodetype"
	"github.com/retrain-ml/retrain/runs"
)

// typedType is a node type with declared field types, whose activity
// decodes `with` strictly the way real node types do (encoding/json into Go
// fields), so a reference of the wrong type would fail it.
var typedType = dags.NodeType{Name: "typed", Fields: []dags.Field{
	{Name: "argv", Type: dags.FieldStringList},
	{Name: "epochs", Type: dags.FieldInt},
	{Name: "rate", Type: dags.FieldNumber},
}}

type typedWith struct {
	Argv   []string `json:"argv"`
	Epochs int      `json:"epochs"`
	Rate   float64  `json:"rate"`
}

// runTyped runs spec with the step and typed node types; it returns the
// result or error and the `with` blocks the typed activity decoded, by node.
func runTyped(t *testing.T, spec string, params map[string]any) (*runs.Result, map[string]typedWith, error) {
	t.Helper()
	var suite harness
	suite.SetLogger(nopLogger{})
	env := suite.NewTestWorkflowEnvironment()
	reg, err := dags.NewRegistry(stepType, typedType)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]typedWith{}
	typed := func(_ context.Context, in nodetype.Input) (map[string]any, error) {
		b, err := json.Marshal(in.With)
		if err != nil {
			return nil, err
		}
		var w typedWith
		if err := json.Unmarshal(b, &w); err != nil {
			return nil, err
		}
		mu.Lock()
		seen[in.Node] = w
		mu.Unlock()
		return map[string]any{"argv": strings.Join(w.Argv, " ")}, nil
	}
	step := func(_ context.Context, in nodetype.Input) (map[string]any, error) { return in.With, nil }
	Register(env)
	env.RegisterActivityWithOptions((&Resolver{AllowInlineSpecs: true, Registry: reg}).Resolve, activity.RegisterOptions{Name: runs.ResolveActivity})
	env.RegisterActivityWithOptions(nodetype.Activity(step), activity.RegisterOptions{Name: "step"})
	env.RegisterActivityWithOptions(nodetype.Activity(typed), activity.RegisterOptions{Name: "typed"})
	b, _ := json.Marshal(spec)
	env.ExecuteWorkflow(runs.PipelineWorkflow, runs.PipelineInput{Spec: b, SpecFile: "test.yaml", Params: params})
	if !env.IsWorkflowCompleted() {
		t.Fatal("workflow did not complete")
	}
	var res runs.Result
	if err := env.GetWorkflowResult(&res); err != nil {
		return nil, seen, err
	}
	return &res, seen, nil
}

func TestPipelineConvertsReferencesToFieldTypes(t *testing.T) {
	// The diamond: a number output in an argv item, a numeric string output
	// in an int field, a list output into a list field.
	res, seen, err := runTyped(t, `
name: diamond
nodes:
  - {id: root, type: step, with: {exit_code: 0, n: "3", rate: 5, list: [1, 2.5, true]}}
  - {id: left, type: step, needs: [root], with: {x: 1}}
  - {id: right, type: step, needs: [root], with: {x: 2}}
  - id: join
    type: typed
    needs: [left, right]
    with:
      argv: ["echo", "${nodes.root.outputs.exit_code}", "${nodes.left.outputs.x}"]
      epochs: "${nodes.root.outputs.n}"
      rate: "${nodes.root.outputs.rate}"
  - {id: whole, type: typed, needs: [root], with: {argv: "${nodes.root.outputs.list}"}}
`, nil)
	if err != nil {
		t.Fatalf("run failed: %v", err)
	}
	if res.Status != runs.StatusSucceeded {
		t.Fatalf("status %s: %s", res.Status, res.Error)
	}
	join := seen["join"]
	if strings.Join(join.Argv, " ") != "echo 0 1" || join.Epochs != 3 || join.Rate != 5 {
		t.Errorf("join got %+v, want argv [echo 0 1], epochs 3, rate 5", join)
	}
	if got := strings.Join(seen["whole"].Argv, " "); got != "1 2.5 true" {
		t.Errorf("whole argv = %q, want \"1 2.5 true\"", got)
	}
}

func TestPipelineRejectsUnconvertibleReferenceBeforeActivity(t *testing.T) {
	_, seen, err := runTyped(t, `
name: bad
nodes:
  - {id: a, type: step, with: {n: "abc"}}
  - {id: b, type: typed, needs: [a], with: {epochs: "${nodes.a.outputs.n}"}}
`, nil)
	res := mustFail(t, err)
	b := wantNode(t, res, "b", runs.NodeFailed, 0)
	want := `with.epochs: ${nodes.a.outputs.n} is a string ("abc"), want int`
	if b.Error != want {
		t.Errorf("node error %q, want %q", b.Error, want)
	}
	if !strings.Contains(res.Error, "node b: "+want) {
		t.Errorf("run error %q does not name node and field", res.Error)
	}
	if _, ran := seen["b"]; ran {
		t.Error("the activity ran with a wrong type")
	}
}

func TestPipelineRejectsUnconvertibleParamBeforeAnyNode(t *testing.T) {
	_, seen, err := runTyped(t, `
name: bad
params:
  epochs: {type: string, default: "10"}
nodes:
  - {id: first, type: step, with: {x: 1}}
  - id: train
    type: typed
    needs: [first]
    with:
      epochs: "${params.epochs}"
`, map[string]any{"epochs": "abc"})
	if err == nil {
		t.Fatal("run succeeded")
	}
	want := `test.yaml:11:7: node train: with.epochs: ${params.epochs} is a string ("abc"), want int`
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "InvalidPipeline") {
		t.Errorf("error %q, want InvalidPipeline with %q", err, want)
	}
	if len(seen) != 0 {
		t.Errorf("nodes ran: %v", seen)
	}
}
