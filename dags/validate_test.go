package dags

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateExample(t *testing.T) {
	if err := mustParse(t, exampleSpec).Validate(testRegistry(t)); err != nil {
		t.Fatal(err)
	}
}

func TestValidateOK(t *testing.T) {
	for _, tc := range []struct{ name, src string }{
		{"ref in string field", `name: x
params:
  dir: {}
nodes:
  - id: a
    type: command
    with: {argv: [ls], dir: "${params.dir}"}
`},
		{"whole list ref", `name: x
params:
  args: {type: list, default: [a]}
  code: {type: int, default: 1}
nodes:
  - id: a
    type: command
    with: {argv: "${params.args}", ok_exit_codes: [0, "${params.code}"]}
`},
		{"int field as integral float", `name: x
nodes:
  - id: a
    type: train
    with: {epochs: 5.0, lr: 1, resume: true, budget: 1d, extra: {any: [thing]}}
`},
		{"transitive upstream", `name: x
nodes:
  - id: a
    type: noop
  - id: b
    type: noop
    needs: [a]
  - id: c
    type: command
    needs: [b]
    when: "${nodes.a.outputs.anything} == 'x'"
    with: {argv: ["${nodes.a.outputs.whatever}"]}
`},
		{"unquoted when", `name: x
nodes:
  - id: gate
    type: noop
  - id: deploy
    type: noop
    needs: [gate]
    when: ${nodes.gate.outputs.passed}
`},
		{"escaped ref is not a ref", `name: x
nodes:
  - id: a
    type: command
    with: {argv: ["echo", "$${nodes.zz.outputs.x}"]}
`},
		{"open with", `name: x
nodes:
  - id: a
    type: script
    with: {code: "print(1)", anything: [1, 2], more: {a: b}}
`},
		{"on_failure refs", `name: x
nodes:
  - id: a
    type: command
    with: {argv: [a]}
  - id: b
    type: command
    needs: [a]
    with: {argv: [b]}
on_failure:
  - id: undo-b
    type: command
    compensates: b
    with: {argv: ["${nodes.b.outputs.stdout}", "${nodes.a.outputs.stdout}"]}
  - id: notify
    type: noop
    compensates: a
    needs: [undo-b]
    when: "${nodes.undo-b.outputs.exit_code} == 0"
`},
		{"retry order across defaults", `name: x
defaults:
  retry: {initial_interval: 5s}
nodes:
  - id: a
    type: noop
    retry: {max_interval: 10s}
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := mustParse(t, tc.src).Validate(testRegistry(t)); err != nil {
				t.Error(err)
			}
		})
	}
}

// three is a valid prefix: nodes a (command), b (noop, needs a), then the
// cases add lines from line 8.
const three = `name: x
params:
  date: {}
nodes:
  - id: a
    type: command
    with: {argv: [a]}
`

func TestValidateErrors(t *testing.T) {
	for _, tc := range []errorCase{
		{"duplicate id", three + "  - id: a\n    type: noop\n", `duplicate node id "a", also at line 5`, 8},
		{"duplicate across on_failure", three + "on_failure:\n  - id: a\n    type: noop\n    compensates: a\n", `duplicate node id "a", also at line 5`, 9},
		{"unknown need", three + "  - id: b\n    type: noop\n    needs: [a, aa, zz]\n", `node "b" needs "zz", which is not a node`, 10},
		{"unknown need suggests", three + "  - id: b\n    type: noop\n    needs: [a, aa]\n", `node "b" needs "aa", which is not a node (did you mean "a"?)`, 10},
		{"self need", three + "  - id: b\n    type: noop\n    needs:\n      - b\n", `node "b" needs itself`, 11},
		{"need twice", three + "  - id: b\n    type: noop\n    needs: [a, a]\n", `node "b" lists "a" in needs twice`, 10},
		{"need on_failure", three + "  - id: b\n    type: noop\n    needs: [u]\non_failure:\n  - id: u\n    type: noop\n    compensates: a\n", `node "b" needs "u", which is an on_failure node`, 10},
		{"cycle", `name: x
nodes:
  - id: a
    type: noop
    needs: [b]
  - id: b
    type: noop
    needs: [a]
`, "cycle: a -> b -> a", 3},
		{"longer cycle", `name: x
nodes:
  - id: start
    type: noop
  - id: c
    type: noop
    needs: [b]
  - id: a
    type: noop
    needs: [c, start]
  - id: b
    type: noop
    needs: [a]
`, "cycle: c -> b -> a -> c", 5},
		{"unknown type", three + "  - id: b\n    type: comand\n", `node "b": unknown type "comand" (did you mean "command"?); known types: command, noop, script, shell, train`, 9},
		{"unknown with field", three + "  - id: b\n    type: command\n    with:\n      argv: [x]\n      agrv: [y]\n", `node "b" (type command): unknown with field "agrv" (did you mean "argv"?); known fields: argv, env, dir, ok_exit_codes`, 12},
		{"with field on noop", three + "  - id: b\n    type: noop\n    with:\n      x: 1\n", `node "b" (type noop): unknown with field "x"; type noop takes no with fields`, 11},
		{"missing required", three + "  - id: b\n    type: command\n    with:\n      dir: /tmp\n", `node "b" (type command): missing required with field "argv"`, 10},
		{"missing required no with", three + "  - id: b\n    type: command\n", `node "b" (type command): missing required with field "argv"`, 8},
		{"missing required open", three + "  - id: b\n    type: script\n    with: {other: 1}\n", `node "b" (type script): missing required with field "code"`, 10},
		{"string list type", three + "  - id: b\n    type: command\n    with:\n      argv: echo hi\n", `with field "argv" must be a list of strings, got string`, 11},
		{"string list item", three + "  - id: b\n    type: command\n    with:\n      argv: [sleep, 5]\n", `with field "argv" item 2 must be a string, got number 5 (quote it: "5")`, 11},
		{"string map", three + "  - id: b\n    type: command\n    with:\n      argv: [x]\n      env: {A: [1]}\n", `with field "env" key "A" must be a string, got list`, 12},
		{"string map type", three + "  - id: b\n    type: command\n    with:\n      argv: [x]\n      env: [A]\n", `with field "env" must be a mapping of strings, got list`, 12},
		{"int list", three + "  - id: b\n    type: command\n    with:\n      argv: [x]\n      ok_exit_codes: [0, 1.5]\n", `with field "ok_exit_codes" item 2 must be an integer, got number 1.5`, 12},
		{"string field", three + "  - id: b\n    type: command\n    with:\n      argv: [x]\n      dir: {a: b}\n", `with field "dir" must be a string, got map`, 12},
		{"null value", three + "  - id: b\n    type: command\n    with:\n      argv: ~\n", `with field "argv" must be a list of strings, got list`[:len(`with field "argv" must be a list of strings, got `)] + "null", 11},
		{"int field", three + "  - id: b\n    type: train\n    with:\n      epochs: many\n", `with field "epochs" must be an integer, got string "many"`, 11},
		{"number field", three + "  - id: b\n    type: train\n    with: {epochs: 1, lr: fast}\n", `with field "lr" must be a number, got string "fast"`, 10},
		{"bool field", three + "  - id: b\n    type: train\n    with: {epochs: 1, resume: \"yes\"}\n", `with field "resume" must be true or false, got string "yes"`, 10},
		{"duration field", three + "  - id: b\n    type: train\n    with: {epochs: 1, budget: 5}\n", `with field "budget" must be a duration such as "10m", got number 5`, 10},
		{"duration field parse", three + "  - id: b\n    type: train\n    with: {epochs: 1, budget: 5 parsecs}\n", `with field "budget" is not a valid duration`, 10},
		{"check func", three + "  - id: b\n    type: train\n    with: {epochs: 5000}\n", `node "b" (type train): epochs must be at most 1000, got 5000`, 10},
		{"bad ref form", three + "  - id: b\n    type: command\n    with:\n      argv: [\"${foo}\"]\n", `node "b": with field "argv": [0]: unknown reference "${foo}"; use ${params.NAME} or ${nodes.ID.outputs.KEY}`, 11},
		{"bad ref missing key", three + "  - id: b\n    type: command\n    needs: [a]\n    with:\n      argv: [\"${nodes.a.outputs}\"]\n", `unknown reference "${nodes.a.outputs}"`, 12},
		{"unterminated ref", three + "  - id: b\n    type: command\n    with:\n      argv: [\"${params.date\"]\n", `unterminated reference "${params.date"`, 11},
		{"param default unterminated ref", "name: x\nparams:\n  d: {default: '2026-01-01${run.'}\nnodes:\n  - {id: a, type: noop}\n", `param "d": unterminated reference "${run."`, 3},
		{"param default refers to a param", "name: x\nparams:\n  d: {default: '${params.e}'}\n  e: {}\nnodes:\n  - {id: a, type: noop}\n", `param "d": ${params.e}: a param's value may use run values`, 3},
		{"bad ref nested", three + "  - id: b\n    type: noop\n    when: '${env.HOME} == 1'\n", `node "b": when: position 1: unknown reference "${env.HOME}"`, 10},
		{"when syntax", three + "  - id: b\n    type: noop\n    needs: [a]\n    when: \"${nodes.a.outputs.exit_code} = 0\"\n", `node "b": when: position 30: unexpected "="; use == to compare`, 11},
		{"unknown param", three + "  - id: b\n    type: command\n    with:\n      argv: [\"${params.dat}\"]\n", `node "b" references params.dat, which is not declared (did you mean "date"?)`, 11},
		{"unknown param in when", three + "  - id: b\n    type: noop\n    when: \"${params.nope}\"\n", `node "b" references params.nope, which is not declared`, 10},
		{"not upstream", three + "  - id: d\n    type: noop\n  - id: c\n    type: command\n    needs: [a]\n    with:\n      argv: [\"${nodes.d.outputs.x}\"]\n", `node "c" references nodes.d, which is not upstream of it; add it to needs`, 14},
		{"not upstream in when", three + "  - id: d\n    type: noop\n  - id: c\n    type: noop\n    when: \"${nodes.d.outputs.x}\"\n", `node "c" references nodes.d, which is not upstream of it; add it to needs`, 12},
		{"downstream is not upstream", three + "  - id: b\n    type: noop\n    needs: [a]\n", "", 0},
		{"unknown node ref", three + "  - id: c\n    type: command\n    with:\n      argv: [\"${nodes.zz.outputs.x}\"]\n", `node "c" references nodes.zz, which is not a node`, 11},
		{"on_failure outputs", three + "  - id: c\n    type: noop\n    when: \"${nodes.u.outputs.x}\"\non_failure:\n  - id: u\n    type: noop\n    compensates: a\n", `node "c" references nodes.u, which is an on_failure node`, 10},
		{"own outputs", three + "  - id: c\n    type: noop\n    when: \"${nodes.c.outputs.x}\"\n", `node "c" references its own outputs`, 10},
		{"unknown output key", three + "  - id: c\n    type: noop\n    needs: [a]\n    when: \"${nodes.a.outputs.stdot} == 'x'\"\n", `node "c" references nodes.a.outputs.stdot, but type command has no output "stdot" (did you mean "stdout"?); its outputs are exit_code, stderr, stdout`, 11},

		{"on_failure compensates unknown", three + "on_failure:\n  - id: u\n    type: noop\n    compensates: aa\n", `on_failure node "u" compensates "aa", which is not a node in nodes (did you mean "a"?)`, 11},
		{"on_failure compensates on_failure", three + "on_failure:\n  - id: u\n    type: noop\n    compensates: a\n  - id: v\n    type: noop\n    compensates: u\n", `on_failure node "v" compensates "u", which is not a node in nodes`, 14},
		{"on_failure needs node", three + "on_failure:\n  - id: u\n    type: noop\n    compensates: a\n    needs: [a]\n", `on_failure node "u" needs "a", which is not an on_failure node`, 12},
		{"on_failure needs unknown", three + "on_failure:\n  - id: u\n    type: noop\n    compensates: a\n    needs: [zz]\n", `on_failure node "u" needs "zz", which is not an on_failure node`, 12},
		{"on_failure cycle", three + "on_failure:\n  - id: u\n    type: noop\n    compensates: a\n    needs: [v]\n  - id: v\n    type: noop\n    compensates: a\n    needs: [u]\n", "cycle: u -> v -> u", 9},
		{"on_failure ref not upstream", three + "  - id: b\n    type: noop\non_failure:\n  - id: u\n    type: noop\n    compensates: a\n    when: \"${nodes.b.outputs.x}\"\n", `on_failure node "u" references nodes.b, which is neither the node it compensates ("a") nor upstream of it`, 14},
		{"on_failure type", three + "on_failure:\n  - id: u\n    type: command\n    compensates: a\n", `on_failure node "u" (type command): missing required with field "argv"`, 9},

		{"defaults retry order", "name: x\ndefaults:\n  retry: {initial_interval: 2m}\nnodes:\n  - id: a\n    type: noop\n", "defaults.retry: max_interval 1m is less than initial_interval 2m", 3},
		{"node retry order", three + "  - id: b\n    type: noop\n    retry:\n      initial_interval: 90s\n", `node "b" retry: max_interval 1m is less than initial_interval 1m30s`, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := mustParse(t, tc.src).Validate(testRegistry(t))
			if tc.want == "" {
				if err != nil {
					t.Errorf("unexpected error: %v", err)
				}
				return
			}
			checkError(t, err, tc.want, tc.line)
		})
	}
}

func TestValidateCollectsAll(t *testing.T) {
	src := `name: x
nodes:
  - id: a
    type: nope
  - id: b
    type: command
    needs: [zz]
    with: {argv: ["${params.p}"]}
  - id: b
    type: noop
`
	err := mustParse(t, src).Validate(testRegistry(t))
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("want ErrorList, got %v", err)
	}
	if len(list) != 4 {
		t.Errorf("got %d errors, want 4:\n%v", len(list), err)
	}
	for i := 1; i < len(list); i++ {
		if list[i-1].Line > list[i].Line {
			t.Errorf("errors not sorted by line:\n%v", err)
		}
	}
}

func TestValidateNilRegistry(t *testing.T) {
	s := mustParse(t, "name: x\nnodes:\n  - id: a\n    type: anything\n    with: {whatever: 1}\n")
	if err := s.Validate(nil); err != nil {
		t.Errorf("nil registry: %v", err)
	}
	s = mustParse(t, "name: x\nnodes:\n  - id: a\n    type: anything\n    needs: [b]\n")
	if err := s.Validate(nil); err == nil || !strings.Contains(err.Error(), "not a node") {
		t.Errorf("nil registry still checks the graph; got %v", err)
	}
}

func TestValidateCheckGetsCopy(t *testing.T) {
	reg, err := NewRegistry(NodeType{
		Name:   "mut",
		Fields: []Field{{Name: "x", Type: FieldAny}},
		Check: func(with map[string]any) error {
			with["x"] = "changed"
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := mustParse(t, "name: x\nnodes:\n  - id: a\n    type: mut\n    with: {x: 1}\n")
	if err := s.Validate(reg); err != nil {
		t.Fatal(err)
	}
	if s.Nodes[0].With["x"] != 1 {
		t.Errorf("Check modified the spec: %v", s.Nodes[0].With)
	}
}

// A Spec built in Go rather than parsed is validated as thoroughly.
func TestValidateBuiltSpec(t *testing.T) {
	s := &Spec{Name: "Bad", Parallelism: -1, Nodes: []*Node{{ID: "a"}, {ID: "9"}}}
	err := s.Validate(testRegistry(t))
	for _, want := range []string{`invalid name "Bad"`, "parallelism must be at least 1", `node "a": missing required field "type"`, `invalid node id "9"`} {
		checkErrorNoFile(t, err, want)
	}
	if err := (&Spec{Name: "x"}).Validate(nil); err == nil || !strings.Contains(err.Error(), "nodes must not be empty") {
		t.Errorf("empty nodes: %v", err)
	}
	// Zero values mean defaults.
	built := &Spec{Name: "x", Nodes: []*Node{{ID: "a", Type: "noop"}}}
	plan, err := Compile(built, testRegistry(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Parallelism != DefaultParallelism || plan.Nodes[0].Timeout != DefaultTimeout {
		t.Errorf("built spec plan: %+v", plan)
	}
}

func checkErrorNoFile(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("want error containing %q, got %v", want, err)
	}
}

// TestValidateNeedsTypoOneError: a typo in needs is reported once, with
// its suggestion; the references to the node that was meant do not add
// "add it to needs" (the wrong fix), and a missing need is reported once
// per referenced node, however often the node is referenced.
func TestValidateNeedsTypoOneError(t *testing.T) {
	src := `name: x
nodes:
  - id: prep
    type: command
    with: {argv: [echo]}
  - id: train
    type: command
    needs: [prepp]
    with:
      argv: [echo, "${nodes.prep.outputs.stdout}", "${nodes.prep.outputs.exit_code}"]
      env: {A: "${nodes.prep.outputs.stdout}"}
`
	err := mustParse(t, src).Validate(testRegistry(t))
	var list ErrorList
	if !errors.As(err, &list) || len(list) != 1 || !strings.Contains(list[0].Error(), `did you mean "prep"`) {
		t.Errorf("want one error suggesting prep, got:\n%v", err)
	}
	noNeeds := strings.Replace(src, "    needs: [prepp]\n", "", 1)
	err = mustParse(t, noNeeds).Validate(testRegistry(t))
	if !errors.As(err, &list) || len(list) != 1 || !strings.Contains(list[0].Error(), "add it to needs") {
		t.Errorf("want one 'add it to needs', got:\n%v", err)
	}
}
