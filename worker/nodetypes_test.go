package worker

import (
	"context"
	"errors"
	"strings"
	"testing"

	gatenode "github.com/retrain-ml/retrain/activities/gate"
	lakenode "github.com/retrain-ml/retrain/activities/lake"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/nodetype"
)

// customType is a node type that doubles its input.
func customType(name, target string) nodetype.Type {
	type with struct {
		N int `json:"n" required:"true" doc:"the number to double"`
	}
	type outputs struct {
		Doubled int `json:"doubled"`
	}
	return nodetype.New(dags.NodeType{Name: name, Target: target},
		func(_ context.Context, _ nodetype.Input, w with) (outputs, error) {
			if w.N < 0 {
				return outputs{}, nodetype.Permanent("Negative", "n is %d", w.N)
			}
			return outputs{Doubled: 2 * w.N}, nil
		})
}

const customSpec = `name: custom
nodes:
  - {id: a, type: command, with: {argv: ["echo", "1"]}}
  - {id: b, type: doubler, needs: [a], with: {n: 21}}
  - {id: c, type: command, needs: [b], with: {argv: ["echo", "${nodes.b.outputs.doubled}"]}}
`

// TestRegistryValidatesCustomTypes: a spec using a custom type validates
// against the worker's registry with that type, including a reference to
// its outputs, and fails against the built-in types alone.
func TestRegistryValidatesCustomTypes(t *testing.T) {
	reg, err := Registry(customType("doubler", ""))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dags.Load("custom.yaml", []byte(customSpec), reg); err != nil {
		t.Fatalf("spec with the custom type: %v", err)
	}
	if _, ok := reg.Lookup("command"); !ok {
		t.Error("registry with a custom type lost the built-in ones")
	}
	_, err = dags.Load("custom.yaml", []byte(customSpec), Types())
	if err == nil || !strings.Contains(err.Error(), `unknown type "doubler"`) {
		t.Fatalf("built-in types accepted the custom type: %v", err)
	}
	// The custom type's fields and outputs are checked like a built-in's.
	bad := strings.Replace(customSpec, "outputs.doubled", "outputs.tripled", 1)
	bad = strings.Replace(bad, "{n: 21}", `{n: "x"}`, 1)
	_, err = dags.Load("custom.yaml", []byte(bad), reg)
	if err == nil || !strings.Contains(err.Error(), `"n" must be an integer`) || !strings.Contains(err.Error(), `no output "tripled"`) {
		t.Fatalf("bad spec: %v", err)
	}
}

func TestCustomTypeCollisions(t *testing.T) {
	tests := []struct {
		name  string
		types []nodetype.Type
		want  string
	}{
		{"built-in name", []nodetype.Type{customType("command", "")}, `node type "command": the name is taken by the built-in node type "command"`},
		{"built-in activity", []nodetype.Type{customType("mine", "command")}, `activity type "command" is taken by the built-in node type "command"`},
		{"built-in child workflow", []nodetype.Type{customType("mine", gatenode.GateWorkflow)}, `activity type "Gate" is taken by the activity or workflow of built-in node type "gate"`},
		{"resolver", []nodetype.Type{customType("mine", "ResolvePipeline")}, "taken by the resolver activity"},
		{"promote activity", []nodetype.Type{customType("mine", lakenode.PromotePlanActivity)}, `taken by an activity of the built-in node type "promote_features"`},
		{"two custom types", []nodetype.Type{customType("mine", ""), customType("mine", "")}, `node type "mine": the name is taken by the custom node type "mine"`},
		{"custom target then name", []nodetype.Type{customType("a", "b"), customType("b", "")}, `node type "b": the name is taken by the activity of custom node type "a"`},
		{"malformed", []nodetype.Type{{NodeType: dags.NodeType{Name: "nofunc"}}}, "has no Run function"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Registry(tt.types...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Registry: %v, want an error containing %q", err, tt.want)
			}
			// New refuses it before it opens anything or calls Temporal:
			// the nil client would panic if it were used.
			_, err = New(context.Background(), nil, "default", Config{}, quiet, WithNodeTypes(tt.types...))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestCustomStepRunsAsActivity runs a custom type's step through the same
// activity wrapper as built-in steps, in the SDK's activity environment:
// input fields arrive, outputs and the attempt come back, and a Permanent
// error keeps its type and is not retryable.
func TestCustomStepRunsAsActivity(t *testing.T) {
	steps, err := customTypes([]nodetype.Type{customType("doubler", "")})
	if err != nil || len(steps) != 1 {
		t.Fatalf("steps %v, %v", steps, err)
	}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivityWithOptions(nodetype.Activity(steps[0].Run), activity.RegisterOptions{Name: "doubler"})
	in := nodetype.Input{Pipeline: "p", RunID: "r", Node: "b", Type: "doubler", With: map[string]any{"n": 21}}
	val, err := env.ExecuteActivity("doubler", in)
	if err != nil {
		t.Fatal(err)
	}
	var res nodetype.Result
	if err := val.Get(&res); err != nil {
		t.Fatal(err)
	}
	if res.Outputs["doubled"] != float64(42) || res.Attempt != 1 || res.EndedAt.Before(res.StartedAt) {
		t.Errorf("result %+v", res)
	}

	in.With = map[string]any{"n": -1}
	_, err = env.ExecuteActivity("doubler", in)
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != "Negative" || !appErr.NonRetryable() {
		t.Fatalf("error %v, want a non-retryable Negative", err)
	}
}
