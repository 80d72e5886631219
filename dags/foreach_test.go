package dags

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

const foreachSpec = `name: fe
params:
  markets: {type: list, default: [us, de, fr]}
parallelism: 4
nodes:
  - id: split
    type: shell
    with: {argv: [echo]}
  - id: train
    type: command
    needs: [split]
    foreach: ${params.markets}
    max_parallel: 2
    when: ${item} != "fr"
    with: {argv: [echo, "${item}", "${item_index}", "${nodes.split.outputs.stdout}"]}
  - id: days
    type: noop
    foreach: ${nodes.split.outputs.dates}
    fail_fast: false
    needs: [split]
  - id: report
    type: command
    needs: [train, days]
    with: {argv: [echo, "${nodes.train.outputs.items}", "${nodes.days.outputs.count}"]}
`

func TestForeachCompile(t *testing.T) {
	s, err := Parse("fe.yaml", []byte(foreachSpec))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Compile(s, testRegistry(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]PlanNode{}
	for _, n := range plan.Nodes {
		byID[n.ID] = n
	}
	if got, want := byID["train"].Foreach, (&PlanForeach{Expr: "${params.markets}", MaxParallel: 2, FailFast: true}); !reflect.DeepEqual(got, want) {
		t.Errorf("train foreach = %+v, want %+v", got, want)
	}
	if got, want := byID["days"].Foreach, (&PlanForeach{Expr: "${nodes.split.outputs.dates}", MaxParallel: 4}); !reflect.DeepEqual(got, want) {
		t.Errorf("days foreach = %+v, want %+v (max_parallel defaults to the parallelism)", got, want)
	}
	if byID["split"].Foreach != nil {
		t.Error("split has a foreach")
	}
}

func TestForeachErrors(t *testing.T) {
	for _, tc := range []struct{ name, spec, want string }{
		{"item outside", `name: x
nodes:
  - id: a
    type: command
    with: {argv: ["${item}"]}
`, `fe.yaml:5:12: node "a" uses ${item}, but it has no foreach`},
		{"item index outside when", `name: x
nodes:
  - id: a
    type: noop
    when: ${item_index} > 1
`, `fe.yaml:5:11: node "a" uses ${item_index}, but it has no foreach`},
		{"on_failure", `name: x
nodes:
  - {id: a, type: noop}
on_failure:
  - id: undo
    type: noop
    compensates: a
    foreach: ${params.p}
`, `fe.yaml:8:14: on_failure node "undo": an on_failure node cannot have foreach`},
		{"max_parallel 0", `name: x
params: {l: {type: list, default: []}}
nodes:
  - {id: a, type: noop, foreach: "${params.l}", max_parallel: 0}
`, `fe.yaml:4:63: node "a": max_parallel must be at least 1, got 0`},
		{"max_parallel text", `name: x
params: {l: {type: list, default: []}}
nodes:
  - {id: a, type: noop, foreach: "${params.l}", max_parallel: lots}
`, `max_parallel must be an integer`},
		{"max_parallel alone", `name: x
nodes:
  - {id: a, type: noop, max_parallel: 2}
`, `fe.yaml:3:39: node "a": max_parallel needs foreach`},
		{"not a list", `name: x
params: {n: {type: int, default: 1}}
nodes:
  - {id: a, type: noop, foreach: "${params.n}"}
`, `foreach over params.n, which is a int; foreach needs a list`},
		{"text", `name: x
nodes:
  - {id: a, type: noop, foreach: "a,b"}
`, `foreach must be one ${...} reference`},
		{"not upstream", `name: x
nodes:
  - {id: a, type: shell, with: {argv: [x]}}
  - {id: b, type: noop, foreach: "${nodes.a.outputs.list}"}
`, `not upstream of it; add it to needs`},
		{"bad output of foreach", `name: x
params: {l: {type: list, default: []}}
nodes:
  - {id: a, type: shell, with: {argv: [x]}, foreach: "${params.l}"}
  - {id: b, type: command, needs: [a], with: {argv: ["${nodes.a.outputs.stdout}"]}}
`, `node a is a foreach node; its outputs are items, count`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse("fe.yaml", []byte(tc.spec))
			if err == nil {
				err = s.Validate(testRegistry(t))
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestItemScope(t *testing.T) {
	sc := Scope{Item: &Item{Value: map[string]any{"market": "de"}, Index: 3}}
	got, err := Interpolate(map[string]any{"m": "${item.market}", "i": "${item_index}", "s": "run-${item_index}-${item.market}"}, sc)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"m": "de", "i": 3, "s": "run-3-de"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if _, err := Interpolate("${item}", Scope{}); err == nil || !strings.Contains(err.Error(), "only a foreach node") {
		t.Errorf("item outside an instance: %v", err)
	}
	if ok, err := EvalWhen(`${item.market} == "de" && ${item_index} == 3`, sc); err != nil || !ok {
		t.Errorf("when = %v, %v", ok, err)
	}
}

// TestPlanJSONCompact checks that the wire form round-trips, that it is
// much smaller than the field-by-field form, and that a plan recorded in
// that older form still decodes.
func TestPlanJSONCompact(t *testing.T) {
	plan := fanOutPlan(t, 2000)
	b, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	var back Plan
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, plan) {
		t.Fatalf("round trip changed the plan")
	}
	type oldPlan struct { // the form recorded before: every field on every node
		Plan
		Nodes []nodeAlias `json:"nodes"`
	}
	old := oldPlan{Plan: *plan}
	for _, n := range plan.Nodes {
		old.Nodes = append(old.Nodes, nodeAlias(n))
	}
	oldJSON, err := json.Marshal(struct {
		planAlias
		Nodes []nodeAlias `json:"nodes"`
	}{planAlias(*plan), old.Nodes})
	if err != nil {
		t.Fatal(err)
	}
	var fromOld Plan
	if err := json.Unmarshal(oldJSON, &fromOld); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&fromOld, plan) {
		t.Fatalf("old form decodes differently")
	}
	t.Logf("2000-node fan-out: %d bytes compact (%d B/node), %d bytes field by field (%d B/node)",
		len(b), len(b)/2000, len(oldJSON), len(oldJSON)/2000)
	if len(b)*2 > len(oldJSON) {
		t.Errorf("compact plan is %d bytes, not under half of %d", len(b), len(oldJSON))
	}
}

func fanOutSpec(n int) string {
	var b strings.Builder
	b.WriteString("name: fan\ndefaults: {timeout: 5m}\nnodes:\n  - {id: start, type: noop}\n")
	for i := range n {
		fmt.Fprintf(&b, "  - {id: n%05d, type: command, needs: [start], with: {argv: [echo, \"%d\"]}}\n", i, i)
	}
	return b.String()
}

func fanOutPlan(t *testing.T, n int) *Plan {
	t.Helper()
	s, err := Parse("fan.yaml", []byte(fanOutSpec(n)))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Compile(s, testRegistry(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// TestPlanTooLarge: a plan history could not record fails compilation,
// naming its size and the limit, rather than hanging a started run. YAML
// aliases let a spec under the 1 MiB text limit expand past it.
func TestPlanTooLarge(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "name: big\nnodes:\n  - {id: start, type: noop, with: {}, description: &big %q}\n", strings.Repeat("x", 1000))
	for i := range 2500 {
		fmt.Fprintf(&b, "  - {id: n%05d, type: command, needs: [start], with: {argv: [*big]}}\n", i)
	}
	s, err := Parse("big.yaml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Compile(s, testRegistry(t), nil)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("a run can record at most %d", MaxPlanBytes)) {
		t.Fatalf("err = %v", err)
	}
	t.Log(err)
	plan := fanOutPlan(t, maxNodes-1)
	size, _ := PlanSize(plan)
	t.Logf("%d-node fan-out (the node limit): plan %d bytes (limit %d)", maxNodes, size, MaxPlanBytes)
}
