package dags

import (
	"slices"
	"testing"
)

const graphSpec = `name: g
nodes:
  - id: a
    type: command
    with: {argv: [x]}
  - id: b
    type: command
    needs: [a]
    with: {argv: [x]}
  - id: c
    type: noop
    needs: [a, b]
    when: "${nodes.a.outputs.exit_code} == 0 && 'q\"x' != '<|>'"
  - id: end
    type: noop
    needs: [c]
on_failure:
  - id: undo-b
    type: noop
    compensates: b
`

func TestMermaid(t *testing.T) {
	want := `flowchart TD
    n1["a (command)"]
    n2["b (command)"]
    n3["c (noop)"]
    n4["end (noop)"]
    subgraph on_failure
        n5["undo-b (noop)"]
    end
    n1 --> n2
    n1 -->|"${nodes.a.outputs.exit_code} == 0 #amp;#amp; 'q#quot;x' != '#lt;#124;#gt;'"| n3
    n2 -->|"${nodes.a.outputs.exit_code} == 0 #amp;#amp; 'q#quot;x' != '#lt;#124;#gt;'"| n3
    n3 --> n4
    n2 -.->|compensates| n5
`
	if got := mustParse(t, graphSpec).Mermaid(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestDot(t *testing.T) {
	want := `digraph "g" {
    node [shape=box];
    "a" [label="a\ncommand"];
    "b" [label="b\ncommand"];
    "c" [label="c\nnoop"];
    "end" [label="end\nnoop"];
    subgraph cluster_on_failure {
        label="on_failure";
        style=dashed;
        "undo-b" [label="undo-b\nnoop"];
    }
    "a" -> "b";
    "a" -> "c" [style=dashed, label="${nodes.a.outputs.exit_code} == 0 && 'q\"x' != '<|>'"];
    "b" -> "c" [style=dashed, label="${nodes.a.outputs.exit_code} == 0 && 'q\"x' != '<|>'"];
    "c" -> "end";
    "b" -> "undo-b" [style=dotted, label="compensates"];
}
`
	if got := mustParse(t, graphSpec).Dot(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestGraphSmall(t *testing.T) {
	s := mustParse(t, "name: one\nnodes:\n  - id: only\n    type: noop\n    needs: [missing]\n")
	if got, want := s.Mermaid(), "flowchart TD\n    n1[\"only (noop)\"]\n"; got != want {
		t.Errorf("Mermaid:\n%s\nwant:\n%s", got, want)
	}
	if got, want := s.Dot(), "digraph \"one\" {\n    node [shape=box];\n    \"only\" [label=\"only\\nnoop\"];\n}\n"; got != want {
		t.Errorf("Dot:\n%s\nwant:\n%s", got, want)
	}
	if got, want := dotQuote(`a"b\c`), `"a\"b\\c"`; got != want {
		t.Errorf("dotQuote: %s, want %s", got, want)
	}
}

// TestPlanEdges: needs become edges by position; unknown ids and repeated
// needs are left out, a duplicate id resolves to its first node, and
// dependents come in list order.
func TestPlanEdges(t *testing.T) {
	p := &Plan{Nodes: []PlanNode{
		{ID: "a"},
		{ID: "b", Needs: []string{"a", "nope", "a"}},
		{ID: "c", Needs: []string{"b", "a"}},
		{ID: "a", Needs: []string{"c"}}, // duplicate id: needs still count, the id resolves to node 0
	}}
	e := p.Edges()
	if want := []string{"a", "b", "c", "a"}; !slices.Equal(e.IDs, want) {
		t.Errorf("IDs %v, want %v", e.IDs, want)
	}
	if e.Index["a"] != 0 || e.Index["c"] != 2 {
		t.Errorf("Index %v", e.Index)
	}
	wantNeeds := [][]int{nil, {0}, {1, 0}, {2}}
	wantDeps := [][]int{{1, 2}, {2}, {3}, nil}
	for i := range p.Nodes {
		if !slices.Equal(e.Needs[i], wantNeeds[i]) || !slices.Equal(e.Dependents[i], wantDeps[i]) {
			t.Errorf("node %d: needs %v dependents %v, want %v and %v", i, e.Needs[i], e.Dependents[i], wantNeeds[i], wantDeps[i])
		}
	}
	if got := e.NeedsOf("c"); !slices.Equal(got, []string{"b", "a"}) {
		t.Errorf("NeedsOf(c) = %v", got)
	}
	if got := e.NeedsOf("zzz"); got != nil {
		t.Errorf("NeedsOf(zzz) = %v", got)
	}
}
