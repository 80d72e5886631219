package dags

import (
	"fmt"
	"reflect"
	"testing"
)

const dryRunSpec = `name: dry
params:
  markets: {type: list, default: [us, de, fr]}
  deploy: {type: bool, default: false}
  model: {type: string, default: ctr}
  end_date: {type: string, default: "${date_add(run.logical_date, -1)}"}
nodes:
  - id: prep
    type: command
    with:
      argv: [prep, "${params.end_date}", "${run.logical_date}", "${run.id}"]
      env: {TOKEN: "${secret.API_TOKEN}", MODEL: "model=${params.model}"}
  - id: train
    type: command
    needs: [prep]
    foreach: ${params.markets}
    when: ${item} != "de"
    with: {argv: [train, "${item}", "${item_index}"]}
  - id: report
    type: shell
    needs: [prep]
    foreach: ${nodes.prep.outputs.stdout}
    with: {argv: [report, "${item}", "${params.model}"]}
  - id: gate
    type: command
    needs: [train]
    with: {argv: [gate, "${params.model}@${nodes.prep.outputs.stdout}"]}
  - id: ship
    type: command
    needs: [gate]
    when: ${nodes.gate.outputs.exit_code} == 0
    with: {argv: [ship]}
  - id: after_ship
    type: command
    needs: [ship]
    with: {argv: [done]}
  - id: announce
    type: command
    needs: [gate]
    when: ${params.deploy}
    with: {argv: [announce]}
  - id: after_announce
    type: command
    needs: [announce]
    with: {argv: [done]}
on_failure:
  - id: undo
    type: command
    compensates: prep
    with: {argv: [undo, "${nodes.prep.outputs.stdout}", "${params.model}"]}
`

func TestDryRun(t *testing.T) {
	s := mustParse(t, dryRunSpec)
	plan, err := Compile(s, testRegistry(t), map[string]any{"markets": `["us","de","fr"]`})
	if err != nil {
		t.Fatal(err)
	}
	rv := RunValues{Pipeline: "dry", LogicalTime: "2026-11-20T00:00:00Z", LogicalDate: "2026-11-20"}
	d, err := NewDryRun(plan, rv, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Params["end_date"] != "2026-11-19" || d.ParamsDigest == plan.ParamsDigest {
		t.Errorf("run-valued param not resolved: %v (digest %s)", d.Params["end_date"], d.ParamsDigest)
	}
	got := map[string]DryNode{}
	for _, n := range d.Nodes {
		got[n.ID] = n
	}
	for id, want := range map[string]string{
		"prep": DryRun, "train": DryRun, "report": DryUndecided, "gate": DryRun,
		"ship": DryUndecided, "after_ship": DryUndecided, "announce": DrySkipped, "after_announce": DrySkipped,
	} {
		if got[id].Decision != want {
			t.Errorf("%s: %s (%s), want %s", id, got[id].Decision, got[id].Reason, want)
		}
	}
	prep := got["prep"]
	// Params and run values resolved; the run id is not known, the
	// secret is never resolved.
	wantWith := map[string]any{
		"argv": []any{"prep", "2026-11-19", "2026-11-20", "${run.id}"},
		"env":  map[string]any{"TOKEN": "${secret.API_TOKEN}", "MODEL": "model=ctr"},
	}
	if !reflect.DeepEqual(prep.With, wantWith) || !reflect.DeepEqual(prep.Pending, []string{"run.id"}) {
		t.Errorf("prep: with %v pending %v", prep.With, prep.Pending)
	}
	train := got["train"]
	if train.Foreach == nil || train.Foreach.Count != 3 || len(train.Foreach.Instances) != 3 {
		t.Fatalf("train foreach: %+v", train.Foreach)
	}
	for i, want := range []string{DryRun, DrySkipped, DryRun} {
		in := train.Foreach.Instances[i]
		if in.Decision != want || in.ID != InstanceID("train", i) {
			t.Errorf("instance %d: %s %s, want %s", i, in.ID, in.Decision, want)
		}
	}
	if w := train.Foreach.Instances[2].With; !reflect.DeepEqual(w["argv"], []any{"train", "fr", 2}) {
		t.Errorf("train[2] with: %v", w)
	}
	if r := got["report"]; r.Foreach.Count != -1 || r.Reason == "" {
		t.Errorf("report: %+v", r)
	}
	// A string that mixes a param and an output: the param filled in.
	if w := got["gate"].With; !reflect.DeepEqual(w["argv"], []any{"gate", "ctr@${nodes.prep.outputs.stdout}"}) {
		t.Errorf("gate with: %v", w)
	}
	if r := got["after_ship"].Reason; r != "runs if upstream node ship runs" {
		t.Errorf("after_ship: %q", r)
	}
	if r := got["announce"].Reason; r != `when "${params.deploy}" is false` {
		t.Errorf("announce: %q", r)
	}
	if r := got["after_announce"].Reason; r != "upstream node announce was skipped" {
		t.Errorf("after_announce: %q", r)
	}
	if len(d.OnFailure) != 1 || d.OnFailure[0].Decision != DryOnFailure || d.OnFailure[0].With["argv"].([]any)[2] != "ctr" {
		t.Errorf("on_failure: %+v", d.OnFailure)
	}

	// With a run id given, ${run.id} resolves.
	rv.ID = "dry-1"
	d, _ = NewDryRun(plan, rv, nil)
	if argv := d.Nodes[0].With["argv"].([]any); argv[3] != "dry-1" || d.Nodes[0].Pending != nil {
		t.Errorf("run id: %v pending %v", argv, d.Nodes[0].Pending)
	}
}

// A when the run could not evaluate fails the run there: the dry run
// says so, and what needs it never starts.
func TestDryRunFails(t *testing.T) {
	s := mustParse(t, `name: bad
params:
  n: {type: string, default: "many"}
nodes:
  - id: a
    type: command
    when: ${params.n} > 3
    with: {argv: [a]}
  - id: b
    type: command
    needs: [a]
    with: {argv: [b]}
`)
	plan, err := Compile(s, testRegistry(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDryRun(plan, RunValues{LogicalDate: "2026-11-20"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Nodes[0].Decision != DryFails || d.Nodes[1].Decision != DryNotStarted {
		t.Fatalf("got %+v", d.Nodes)
	}
}

// With the registry, a node type's Check sees the `with` as this run
// resolves it: a schedule's date, which validation could not know, is
// refused there, and the node is marked as where the run would fail.
func TestDryRunChecksResolvedWith(t *testing.T) {
	reg, err := NewRegistry(NodeType{
		Name:   "load",
		Fields: []Field{{Name: "date", Type: FieldString}, {Name: "table", Type: FieldString}},
		Check: func(with map[string]any) error {
			if d, ok := with["date"].(string); ok && !HasRef(d) && d < "2026-01-01" {
				return AtField("date", fmt.Errorf("date %s: the table starts on 2026-01-01", d))
			}
			return nil
		},
		Outputs: []string{"rows"},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := mustParse(t, `name: load
params:
  day: {type: string, default: "${date_add(run.logical_date, -1)}"}
nodes:
  - {id: a, type: load, with: {date: "${params.day}", table: t}}
  - {id: b, type: load, needs: [a], with: {date: "${nodes.a.outputs.rows}"}}
`)
	plan, err := Compile(s, reg, nil) // the date is not known yet: it compiles
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDryRun(plan, RunValues{LogicalDate: "2026-01-01"}, reg)
	if err != nil {
		t.Fatal(err)
	}
	if n := d.Nodes[0]; n.Decision != DryFails || n.Reason != "with, as this run resolves it: date 2025-12-31: the table starts on 2026-01-01" {
		t.Errorf("a: %s %q", n.Decision, n.Reason)
	}
	if n := d.Nodes[1]; n.Decision != DryNotStarted {
		t.Errorf("b: %s %q", n.Decision, n.Reason)
	}
	d, _ = NewDryRun(plan, RunValues{LogicalDate: "2026-03-01"}, reg)
	if n := d.Nodes[0]; n.Decision != DryRun || n.With["date"] != "2026-02-28" {
		t.Errorf("a on 2026-03-01: %s %q %v", n.Decision, n.Reason, n.With)
	}
}
