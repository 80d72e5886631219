package dags

import (
	"fmt"
	"strings"
	"testing"
)

// A Check that bounds a field sees the run's param values: Validate skips
// ${params.n}, Compile binds it and checks again, so a param past the
// bound is refused before any node runs.
func TestCompileChecksBoundParams(t *testing.T) {
	var seen []map[string]any
	reg, err := NewRegistry(NodeType{
		Name:   "ranks",
		Fields: []Field{{Name: "n", Type: FieldInt}, {Name: "name", Type: FieldString}, {Name: "from", Type: FieldString}},
		Check: func(with map[string]any) error {
			seen = append(seen, with)
			if n, ok := with["n"].(float64); ok && n > 4 {
				return fmt.Errorf("n %v is above the limit of 4", n)
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := mustParse(t, `name: p
params:
  n: {type: int, default: 2}
  name: {type: string, default: x}
nodes:
  - id: a
    type: ranks
    with: {n: "${params.n}", name: "r-${params.name}"}
  - id: b
    type: ranks
    needs: [a]
    with: {from: "${nodes.a.outputs.x}", n: 1}
`)
	if _, err := Compile(s, reg, map[string]any{"n": 4}); err != nil {
		t.Fatalf("n 4: %v", err)
	}
	seen = nil
	_, err = Compile(s, reg, map[string]any{"n": "30"})
	if err == nil || !strings.Contains(err.Error(), "node a (type ranks): n 30 is above the limit of 4") {
		t.Fatalf("n 30: %v", err)
	}
	// The bound block is what the node gets: the param's value as JSON
	// gives it, text spliced; a node's output stays a reference.
	var a map[string]any
	bs := 0
	for _, w := range seen {
		if _, ok := w["from"]; ok {
			bs++
		} else if w["n"] == 30.0 {
			a = w
		}
	}
	if a == nil || a["name"] != "r-x" {
		t.Errorf("node a checked with %v, want n 30 and name r-x", seen)
	}
	if bs != 1 {
		t.Errorf("node b, which no param changes, checked %d times: want once, by Validate", bs)
	}
}

// A param with no default that the run does not give yet (what validating
// a spec without params binds) stays the run's: Check sees the reference,
// never a null in its place.
func TestCompileLeavesUnboundParamsToTheRun(t *testing.T) {
	reg, err := NewRegistry(NodeType{
		Name:   "floor",
		Fields: []Field{{Name: "min", Type: FieldAny}},
		Check: func(with map[string]any) error {
			if v, ok := with["min"]; ok && v == nil {
				return fmt.Errorf("min: want a number, got null")
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := mustParse(t, `name: p
params:
  late: {type: number, required: false}
nodes:
  - id: a
    type: floor
    with: {min: "${params.late}"}
`)
	if _, err := Compile(s, reg, nil); err != nil {
		t.Fatalf("compile without params: %v", err)
	}
}

// A default that a node's check refuses fails `dag validate`, but a run
// that gives the param another value is checked with that value only:
// the default it replaces cannot refuse it, and a value it gives that is
// the refused default still is.
func TestCompileChecksTheGivenParamNotItsDefault(t *testing.T) {
	reg, err := NewRegistry(NodeType{
		Name:   "bake",
		Fields: []Field{{Name: "bake", Type: FieldString}},
		Check: func(with map[string]any) error {
			if b, _ := with["bake"].(string); b == "6s" {
				return fmt.Errorf("bake: 6s is shorter than the warmup 16s")
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := mustParse(t, `name: p
params:
  bake: {type: string, default: "6s"}
nodes:
  - id: a
    type: bake
    with: {bake: "${params.bake}"}
`)
	if err := s.Validate(reg); err == nil || !strings.Contains(err.Error(), "shorter than the warmup") {
		t.Errorf("validate with the default: %v, want the check's error", err)
	}
	if _, err := Compile(s, reg, map[string]any{"bake": "24s"}); err != nil {
		t.Errorf("a run giving bake 24s: %v", err)
	}
	if _, err := Compile(s, reg, map[string]any{"bake": "6s"}); err == nil || !strings.Contains(err.Error(), "shorter than the warmup") {
		t.Errorf("a run giving bake 6s: %v, want the check's error", err)
	}
}
