package workflows

import (
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/runs"
)

// emitType is step with open outputs: a node of it may declare outputs,
// and outputs its `with` block, so a spec says what the node outputs.
var emitType = dags.NodeType{Name: "emit", OpenWith: true, OpenOutputs: true}

func outputsHarness(t *testing.T) *harness {
	h := newHarness(t)
	h.types = []dags.NodeType{emitType}
	return h
}

// TestDeclaredOutputsPresent: outputs of the declared types pass, and a
// downstream node gets them.
func TestDeclaredOutputsPresent(t *testing.T) {
	h := outputsHarness(t)
	res := h.succeed(`
name: declared
nodes:
  - id: score
    type: emit
    with: {auc: 0.71, model_uri: "s3://m/1", epochs: 3, tags: [a], meta: {k: v}, extra: null, more: x}
    outputs: {auc: number, model_uri: string, epochs: int, tags: list, meta: map, extra: any}
  - {id: use, type: step, needs: [score], with: {auc: "${nodes.score.outputs.auc}", msg: "auc=${nodes.score.outputs.auc}"}}
`, nil, nil)
	wantNode(t, res, "score", runs.NodeSucceeded, 1)
	use := wantNode(t, res, "use", runs.NodeSucceeded, 1)
	if use.Outputs["auc"] != 0.71 || use.Outputs["msg"] != "auc=0.71" {
		t.Errorf("use got %v", use.Outputs)
	}
}

// TestDeclaredOutputsMismatch: a declared output missing or of another
// type fails the node at once (its retry policy notwithstanding), names
// the key, the wanted type and what came, and stops the run.
func TestDeclaredOutputsMismatch(t *testing.T) {
	for _, tc := range []struct {
		name, with, want string
	}{
		{"mistyped", `{auc: "n/a", model_uri: "s3://m"}`, `output auc is a string ("n/a"), want number`},
		{"missing", `{auc: 0.7}`, `output model_uri is missing, want string`},
		{"both", `{auc: [0.7]}`, `output auc is a list ([0.7]), want number; output model_uri is missing, want string`},
		{"null", `{auc: null, model_uri: "s3://m"}`, `output auc is null, want number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := outputsHarness(t)
			_, err := h.run(`
name: declared
defaults: {retry: {max_attempts: 3, initial_interval: 1s}}
nodes:
  - id: score
    type: emit
    with: `+tc.with+`
    outputs: {auc: number, model_uri: string}
  - {id: use, type: step, needs: [score], with: {auc: "${nodes.score.outputs.auc}"}}
`, nil, nil)
			res := mustFail(t, err)
			score := wantNode(t, res, "score", runs.NodeFailed, 1)
			if want := tc.want + " (type: BadOutput, retryable: false)"; score.Error != want {
				t.Errorf("node error %q, want %q", score.Error, want)
			}
			if score.Outputs == nil || score.StartedAt == nil || score.EndedAt == nil {
				t.Errorf("the failed node's result is not kept: %+v", score)
			}
			if !strings.Contains(res.Error, "node score: "+tc.want) {
				t.Errorf("run error %q, want it to hold %q", res.Error, "node score: "+tc.want)
			}
			wantNode(t, res, "use", runs.NodeCancelled, 0)
			if len(h.order) != 1 {
				t.Errorf("activities ran: %v, want score once", h.order)
			}
		})
	}
}

// TestUndeclaredOutputsUnchecked: without a declaration, an open-output
// node's outputs are whatever it gives, as in plans recorded before
// declarations existed.
func TestUndeclaredOutputsUnchecked(t *testing.T) {
	h := outputsHarness(t)
	res := h.succeed(`
name: open
nodes:
  - {id: score, type: emit, with: {auc: "n/a"}}
  - {id: use, type: step, needs: [score], with: {auc: "${nodes.score.outputs.auc}"}}
`, nil, nil)
	if use := wantNode(t, res, "use", runs.NodeSucceeded, 1); use.Outputs["auc"] != "n/a" {
		t.Errorf("use got %v", use.Outputs)
	}
}

// TestDeclaredOutputsCompensation: an on_failure node's declaration is
// checked too; its failure is reported with the run's.
func TestDeclaredOutputsCompensation(t *testing.T) {
	h := outputsHarness(t)
	_, err := h.run(`
name: comp
nodes:
  - {id: a, type: step}
  - {id: bad, type: step, needs: [a], with: {permanent: true}}
on_failure:
  - id: undo
    type: emit
    compensates: a
    with: {removed: "yes"}
    outputs: {removed: bool}
`, nil, nil)
	res := mustFail(t, err)
	if len(res.Compensations) != 1 || res.Compensations[0].Status != runs.NodeFailed ||
		res.Compensations[0].Error != `output removed is a string ("yes"), want bool (type: BadOutput, retryable: false)` {
		t.Fatalf("compensations %+v", res.Compensations)
	}
	if !strings.Contains(res.Error, `compensation undo failed: output removed is a string ("yes"), want bool`) {
		t.Errorf("run error %q", res.Error)
	}
}
