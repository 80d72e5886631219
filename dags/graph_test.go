package dags

import "testing"

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
