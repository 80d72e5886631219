package workflows

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/runs"
)

const rerunSpec = `
name: rr
params:
  broken: {type: bool, default: false}
  seed: {type: int, default: 1}
nodes:
  - id: a
    type: step
    with: {v: 1}
  - id: b
    type: step
    needs: [a]
    with: {from_a: "${nodes.a.outputs.v}", seed: "${params.seed}"}
  - id: c
    type: step
    needs: [b]
    with: {permanent: "${params.broken}"}
  - id: d
    type: step
    needs: [c]
    with: {v: 4}
  - id: e
    type: step
    with: {v: 5}
`

// failedRun runs rerunSpec with c broken, and returns its result and plan.
func failedRun(t *testing.T) (*runs.Result, json.RawMessage) {
	t.Helper()
	h := newHarness(t)
	res, err := h.run(rerunSpec, map[string]any{"broken": true}, nil)
	if err == nil {
		t.Fatal("the broken run succeeded")
	}
	failed, ok := runs.ResultFromError(err)
	if !ok {
		t.Fatalf("no result on the failure: %v (%v)", err, res)
	}
	reg, err := dags.NewRegistry(stepType)
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := json.Marshal(rerunSpec)
	out, err := (&Resolver{AllowInlineSpecs: true, Registry: reg}).Resolve(context.Background(),
		ResolveInput{Spec: spec, SpecFile: "test.yaml", Params: map[string]any{"broken": true}})
	if err != nil {
		t.Fatal(err)
	}
	plan, _ := json.Marshal(out.Plan)
	if got := failed.Node("c").Status; got != runs.NodeFailed {
		t.Fatalf("c is %s, want failed", got)
	}
	return failed, plan
}

// rerun reruns the failed run with params and from, the nodes named in
// gone having lost their outputs, and returns the result and the nodes
// that ran, in order.
func rerun(t *testing.T, failed *runs.Result, plan json.RawMessage, params map[string]any, from []string, gone map[string]string) (*runs.Result, []string, error) {
	t.Helper()
	h := newHarness(t)
	h.source = &runs.Reuse{Run: failed.ID, Plan: plan, Nodes: failed.Nodes}
	h.reuse = &runs.Reuse{Run: failed.ID, From: from}
	h.gone = gone
	res, err := h.run(rerunSpec, params, nil)
	return res, h.order, err
}

func reusedOf(res *runs.Result) []string {
	_, nodes := runs.ReusedNodes(res)
	return nodes
}

func TestRerunRunsWhatFailed(t *testing.T) {
	failed, plan := failedRun(t)
	res, ran, err := rerun(t, failed, plan, map[string]any{"broken": false}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ran, []string{"c", "d"}) {
		t.Errorf("ran %v, want [c d]", ran)
	}
	if got := reusedOf(res); !slices.Equal(got, []string{"a", "b", "e"}) {
		t.Errorf("reused %v, want [a b e]", got)
	}
	if res.ReusedFrom != failed.ID || res.Node("a").ReusedFrom != failed.ID {
		t.Errorf("reused_from %q / %q, want %q", res.ReusedFrom, res.Node("a").ReusedFrom, failed.ID)
	}
	if got := res.Node("c").NotReused; got != "failed in run "+failed.ID {
		t.Errorf("c not reused because %q", got)
	}
	if got := res.Node("d").NotReused; !strings.Contains(got, "cancelled in run") {
		t.Errorf("d not reused because %q", got)
	}
	// b's outputs are the earlier run's, and c read them.
	if got := res.Node("b").Outputs["from_a"]; got != float64(1) {
		t.Errorf("b's outputs: %v", res.Node("b").Outputs)
	}
	var b strings.Builder
	writeRow(&b, *res.Node("a"), "")
	if !strings.Contains(b.String(), "· reused from run "+failed.ID) {
		t.Errorf("the UI's row of a reused node: %s", b.String())
	}
	if want := "reused from run " + failed.ID + ": nodes a, b, e"; runs.ReusedLine(res) != want {
		t.Errorf("line %q, want %q", runs.ReusedLine(res), want)
	}
}

func TestRerunFrom(t *testing.T) {
	failed, plan := failedRun(t)
	res, ran, err := rerun(t, failed, plan, map[string]any{"broken": false}, []string{"b"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ran, []string{"b", "c", "d"}) {
		t.Errorf("ran %v, want [b c d]", ran)
	}
	if got := reusedOf(res); !slices.Equal(got, []string{"a", "e"}) {
		t.Errorf("reused %v, want [a e]", got)
	}
	if got := res.Node("b").NotReused; got != "named by --from" {
		t.Errorf("b: %q", got)
	}
}

// A param a reused node reads changed: it runs, saying which.
func TestRerunParamChanged(t *testing.T) {
	failed, plan := failedRun(t)
	res, ran, err := rerun(t, failed, plan, map[string]any{"broken": false, "seed": 2}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ran, []string{"b", "c", "d"}) {
		t.Errorf("ran %v, want [b c d]", ran)
	}
	if got := res.Node("b").NotReused; got != "param seed 1 -> 2" {
		t.Errorf("b: %q", got)
	}
}

// Outputs that are gone are not reused, nor is anything downstream.
func TestRerunOutputsGone(t *testing.T) {
	failed, plan := failedRun(t)
	res, ran, err := rerun(t, failed, plan, map[string]any{"broken": false}, nil, map[string]string{"a": "snapshot 7 of t is gone"})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ran)
	if !slices.Equal(ran, []string{"a", "b", "c", "d"}) {
		t.Errorf("ran %v, want a b c d", ran)
	}
	if got := reusedOf(res); !slices.Equal(got, []string{"e"}) {
		t.Errorf("reused %v, want [e]", got)
	}
	if res.Node("a").NotReused != "snapshot 7 of t is gone" || res.Node("b").NotReused != "upstream node a runs again" {
		t.Errorf("a: %q, b: %q", res.Node("a").NotReused, res.Node("b").NotReused)
	}
}

func TestRerunFromUnknownNode(t *testing.T) {
	failed, plan := failedRun(t)
	_, ran, err := rerun(t, failed, plan, map[string]any{"broken": false}, []string{"nope"}, nil)
	if err == nil || !strings.Contains(err.Error(), `--from "nope": pipeline rr has no node "nope"`) {
		t.Fatalf("err = %v", err)
	}
	if len(ran) != 0 {
		t.Errorf("ran %v before refusing", ran)
	}
}

// The results a rerun takes over are the earlier run's, read on a
// worker: outputs a starter sends along are ignored, and a run that does
// not exist is refused before a node runs.
func TestRerunTrustsOnlyTheEarlierRun(t *testing.T) {
	failed, plan := failedRun(t)
	h := newHarness(t)
	h.source = &runs.Reuse{Run: failed.ID, Plan: plan, Nodes: failed.Nodes}
	fake := slices.Clone(failed.Nodes)
	for i := range fake {
		fake[i].Status, fake[i].Outputs = runs.NodeSucceeded, map[string]any{"v": "forged"}
	}
	h.reuse = &runs.Reuse{Run: failed.ID, Plan: plan, Nodes: fake}
	res, err := h.run(rerunSpec, map[string]any{"broken": false}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(h.order, []string{"c", "d"}) || res.Node("a").Outputs["v"] != float64(1) {
		t.Errorf("ran %v; a's outputs %v", h.order, res.Node("a").Outputs)
	}

	h = newHarness(t)
	h.reuse = &runs.Reuse{Run: "no-such-run"}
	_, err = h.run(rerunSpec, nil, nil)
	if err == nil || !strings.Contains(err.Error(), `run "no-such-run" does not exist`) || len(h.order) != 0 {
		t.Errorf("rerun of a missing run: %v (ran %v)", err, h.order)
	}
}

// selectReuse alone: a node the earlier run's on_failure undid, one the
// spec changed, and one the earlier plan lacks all run.
func TestSelectReuseReasons(t *testing.T) {
	prior := &dags.Plan{Pipeline: "p", Params: map[string]any{"x": 1.0}, Nodes: []dags.PlanNode{
		{ID: "a", Type: "step"},
		{ID: "b", Type: "step", Needs: []string{"a"}, With: map[string]any{"k": "old"}},
		{ID: "c", Type: "step"},
	}}
	plan := &dags.Plan{Pipeline: "p", Params: map[string]any{"x": 1}, Nodes: []dags.PlanNode{
		{ID: "a", Type: "step"},
		{ID: "b", Type: "step", Needs: []string{"a"}, With: map[string]any{"k": "new"}},
		{ID: "c", Type: "step", With: map[string]any{"x": "${params.x}"}},
		{ID: "n", Type: "step"},
	}}
	ok := func(id string) runs.NodeState { return runs.NodeState{ID: id, Status: runs.NodeSucceeded} }
	in := &runs.Reuse{Run: "r1", Nodes: []runs.NodeState{ok("a"), ok("b"), ok("c")},
		Compensations: []runs.NodeState{{ID: "undo_a", Status: runs.NodeSucceeded, Compensates: "a"}}}
	got, err := selectReuse(plan, prior, in)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"a": "run r1's on_failure node undo_a undid it",
		"b": "its with changed in the spec",
		"c": "its with changed in the spec", // the param's value is the same (1 == 1.0); the with is not
		"n": "not in run r1's pipeline",
	}
	for id, w := range want {
		if got[id].reason != w {
			t.Errorf("%s: %q, want %q", id, got[id].reason, w)
		}
	}
	// The same param value read the same way is no change.
	prior.Nodes[2].With = map[string]any{"x": "${params.x}"}
	in.Compensations = nil
	got, _ = selectReuse(plan, prior, in)
	if got["c"].reason != "" || got["a"].reason != "" {
		t.Errorf("c: %q, a: %q; want both reused", got["c"].reason, got["a"].reason)
	}
}
