package dags

import (
	"strings"
	"testing"
)

func TestNestedTypesCheckedAtValidation(t *testing.T) {
	reg, err := NewRegistry(NodeType{
		Name: "judge",
		Fields: []Field{{Name: "limits", Type: FieldAny, Nested: []Nested{
			{Path: "*.max", Type: FieldNumber}, {Path: "*.runs", Type: FieldInt},
		}}, {Name: "weights", Type: FieldAny, Nested: []Nested{{Path: "*", Type: FieldNumber}}}},
	}, NodeType{Name: "shell", Fields: []Field{{Name: "argv", Type: FieldStringList}}, OpenOutputs: true})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, with, want string }{
		{"literals of the right type", `{limits: {a: {max: 0.5, runs: 3}}, weights: [1, 2.5]}`, ""},
		{"a literal of the wrong type", `{limits: {a: {max: high}}}`, `with.limits.a.max: a string ("high"), want number`},
		{"an int that is not whole", `{limits: {a: {runs: 1.5}}}`, `with.limits.a.runs`},
		{"a list item", `{weights: [1, "x"]}`, `with.weights[1]`},
		{"a string param's default", `{limits: {a: {max: "${params.name}"}}}`, `with.limits.a.max: ${params.name} is a string ("smoke"), want number`},
		{"a number param", `{limits: {a: {max: "${params.cap}"}}}`, ""},
		{"a declared output of the wrong type", `{limits: {a: {max: "${nodes.prep.outputs.label}"}}}`, `declared as string, want number`},
		{"a declared output of the right type", `{limits: {a: {max: "${nodes.prep.outputs.cap}"}}}`, ""},
		{"an undeclared output is left to run time", `{limits: {a: {max: "${nodes.raw.outputs.other}"}}}`, ""},
		{"a reference for the whole map is left to run time", `{limits: "${nodes.raw.outputs.all}"}`, ""},
		{"null is the node's to judge", `{limits: {a: {max: null}}}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := `
name: n
params:
  name: {default: smoke}
  cap: {type: number, default: 0.9}
nodes:
  - id: prep
    type: shell
    with: {argv: [prep]}
    outputs: {label: string, cap: number}
  - id: raw
    type: shell
    with: {argv: [raw]}
  - id: j
    type: judge
    needs: [prep, raw]
    with: ` + tt.with + "\n"
			s, err := Parse("n.yaml", []byte(spec))
			if err != nil {
				t.Fatal(err)
			}
			err = s.Validate(reg)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case tt.want != "" && err == nil:
				t.Fatalf("accepted, want an error about %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("error %q lacks %q", err, tt.want)
			}
		})
	}
}

func TestParseNested(t *testing.T) {
	got, err := ParseNested("*.min:number, *.direction:string")
	if err != nil || len(got) != 2 || got[0] != (Nested{"*.min", FieldNumber}) || got[1] != (Nested{"*.direction", FieldString}) {
		t.Fatalf("got %v, %v", got, err)
	}
	for _, bad := range []string{"*.min", ":number", "*.x:[]string", "*.x:nope"} {
		if _, err := ParseNested(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}
