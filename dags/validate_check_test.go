package dags

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// checkRegistry has a type whose Check reads nested values (like a
// canary's steps), a type that declares its metrics, and one that checks
// metric names against them (like a gate).
func checkRegistry(t *testing.T) *Registry {
	t.Helper()
	reg, err := NewRegistry(
		NodeType{Name: "make", OpenOutputs: true, OpenWith: true},
		NodeType{
			Name:   "rollout",
			Fields: []Field{{Name: "steps", Type: FieldAny, Required: true}, {Name: "bake", Type: FieldDuration}},
			Check: func(with map[string]any) error {
				steps, ok := with["steps"].([]any)
				if !ok || HasRef(with["steps"]) {
					return nil
				}
				for i, s := range steps {
					m, _ := s.(map[string]any)
					if p, ok := m["percent"].(float64); ok && i == len(steps)-1 && p != 100 {
						return AtField("steps", fmt.Errorf("steps[%d].percent: the last step's percent is %v; it must be 100", i, p))
					}
					if q, ok := m["query"].(string); ok && strings.Contains(q, "${bogus}") {
						return AtField("steps", fmt.Errorf("steps[%d].query: unknown placeholder", i))
					}
				}
				return nil
			},
		},
		NodeType{
			Name:   "score",
			Fields: []Field{{Name: "program", Type: FieldString}},
			Metrics: func(output string, with map[string]any) ([]string, bool) {
				if output != "metrics" || with["program"] != nil {
					return nil, false
				}
				return []string{"auc", "log_loss"}, true
			},
		},
		NodeType{
			Name:   "judge",
			Fields: []Field{{Name: "from", Type: FieldString}, {Name: "metrics", Type: FieldAny}},
			CheckMetrics: func(with map[string]any, source func(any) ([]string, string, bool)) error {
				names, from, ok := source(with["from"])
				if !ok {
					return nil
				}
				m, _ := with["metrics"].(map[string]any)
				var errs []error
				for name := range m {
					if !slices.Contains(names, name) {
						errs = append(errs, AtField("metrics", fmt.Errorf("metrics.%s: %s has no metric %q%s", name, from, name, DidYouMean(name, names))))
					}
				}
				return errors.Join(errs...)
			},
		},
	)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func TestCheckSeesParamsDefaults(t *testing.T) {
	spec := `name: p
params:
  last: {type: number, default: 90}
  bake: {type: string, default: 30m}
  window: {type: string, default: "5m"}
nodes:
  - id: r
    type: rollout
    with:
      steps:
        - {percent: 10, bake: "${params.bake}"}
        - {percent: "${params.last}"}
`
	s := parseNamed(t, spec)
	err := s.Validate(checkRegistry(t))
	want := `p.yaml:12:12: node "r" (type rollout): steps[1].percent: the last step's percent is 90; it must be 100 (checked with params bake, last at their defaults)`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	// Given 100 for the run, the plan compiles; given 50, it is refused
	// before any node runs, naming the run's params.
	s.Params[0].Default = 100.0
	if _, err := Compile(s, checkRegistry(t), nil); err != nil {
		t.Fatalf("default 100: %v", err)
	}
	_, err = Compile(s, checkRegistry(t), map[string]any{"last": "50"})
	if err == nil || !strings.Contains(err.Error(), "p.yaml:12:12: ") || !strings.Contains(err.Error(), "percent is 50; it must be 100 (checked with params bake, last as given for this run)") {
		t.Fatalf("last=50: %v", err)
	}
}

// A param that holds run values (a schedule's) is known only when the run
// starts, and a null one is left to the node: neither is checked early,
// and neither stops the plan compiling.
func TestCheckLeavesRunValuesAndNulls(t *testing.T) {
	spec := `name: p
params:
  last: {type: string, required: false}
  pct: {type: string, default: "${date_add(run.logical_date, -1)}"}
nodes:
  - id: r
    type: rollout
    with:
      steps:
        - {percent: 10, bake: 1m}
        - {percent: "${params.last}"}
        - {percent: "${params.pct}"}
`
	s := parseNamed(t, spec)
	if _, err := Compile(s, checkRegistry(t), map[string]any{"pct": "${date_add(run.logical_date, -2)}"}); err != nil {
		t.Fatal(err)
	}
}

// A string mixing a param and an escaped placeholder keeps the
// placeholder as spec text: the Check sees $${...}, not a reference.
func TestCheckKeepsEscapes(t *testing.T) {
	got, used := knownWith(map[string]any{"q": `rate(x{v="$${version}"}[${params.w}])`, "n": "${nodes.a.outputs.b}"}, map[string]any{"w": "5m"})
	if got["q"] != `rate(x{v="$${version}"}[5m])` || got["n"] != "${nodes.a.outputs.b}" {
		t.Fatalf("got %v", got)
	}
	if !slices.Equal(used["q"], []string{"w"}) || used["n"] != nil {
		t.Fatalf("used %v", used)
	}
	if HasRef(got["q"]) {
		t.Fatal("the resolved query reads as a reference")
	}
}

func TestMetricNamesCheckedAgainstTheirSource(t *testing.T) {
	base := `name: m
nodes:
  - id: s
    type: score
    with: {PROGRAM}
  - id: j
    type: judge
    needs: [s]
    with:
      from: ${nodes.s.outputs.metrics}
      metrics:
        AUC: {min: 0.7}
        log_loss: {max: 0.5}
`
	s := parseNamed(t, strings.Replace(base, "{PROGRAM}", "{}", 1))
	err := s.Validate(checkRegistry(t))
	want := `m.yaml:12:9: node "j" (type judge): metrics.AUC: node s (type score) has no metric "AUC" (did you mean "auc"?)`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	// Where the metrics are the program's to choose, nothing is said.
	s = parseNamed(t, strings.Replace(base, "{PROGRAM}", "{program: ./score.sh}", 1))
	if err := s.Validate(checkRegistry(t)); err != nil {
		t.Fatalf("unknown metrics: %v", err)
	}
	// Nor when the source is not a node that declares them.
	s = parseNamed(t, strings.Replace(strings.Replace(base, "type: score", "type: make", 1), "{PROGRAM}", "{}", 1))
	if err := s.Validate(checkRegistry(t)); err != nil {
		t.Fatalf("open outputs: %v", err)
	}
}

func TestFieldPos(t *testing.T) {
	s := parseNamed(t, `name: f
nodes:
  - id: r
    type: rollout
    with:
      steps:
        - percent: 10
          query: a
        - {percent: 100}
`)
	n := s.Node("r")
	block := Pos{Line: 5, Col: 5}
	for _, c := range []struct {
		msg  string
		want Pos
	}{
		{"steps[0].query: bad", Pos{8, 11}},
		{"steps[0].nope: bad", Pos{7, 11}}, // the closest placed prefix
		{"steps[1]: bad", Pos{9, 11}},
		{"steps: bad", Pos{6, 7}},
		{"other.thing: bad", Pos{6, 7}}, // not this field's path: the field
		{"no path here", Pos{6, 7}},
	} {
		if got := n.fieldPos("steps", c.msg, block); got != c.want {
			t.Errorf("%q: got %v, want %v", c.msg, got, c.want)
		}
	}
}

func TestDidYouMeanCase(t *testing.T) {
	if got := DidYouMean("AUC", []string{"accuracy", "auc"}); got != ` (did you mean "auc"?)` {
		t.Fatalf("got %q", got)
	}
}

// parseNamed parses src as NAME.yaml, NAME its spec's name (its first line).
func parseNamed(t *testing.T, src string) *Spec {
	t.Helper()
	name := strings.TrimPrefix(strings.SplitN(src, "\n", 2)[0], "name: ")
	s, err := Parse(name+".yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return s
}
