package dags

import (
	"math"
	"reflect"
	"strings"
	"testing"
)

func whenScope() Scope {
	return Scope{
		Params: map[string]any{
			"env":    "prod",
			"force":  false,
			"n":      5,
			"limit":  0.8,
			"none":   nil,
			"list":   []any{1.0, "a"},
			"list2":  []any{1, "a"},
			"map":    map[string]any{"a": 1.0},
			"yes":    "TRUE",
			"no":     " false\n",
			"maybe":  "maybe",
			"numstr": "10",
			"nan":    math.NaN(),
		},
		Outputs: map[string]map[string]any{
			"a":    {"exit_code": 0.0, "exit_text": "0", "stdout": "42\n", "name": "b"},
			"gate": {"passed": true, "failed": false, "score": "0.91"},
			"eval": {"auc": 0.85},
		},
	}
}

func TestEvalWhen(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want bool
	}{
		{"", true},
		{"   ", true},
		{"true", true},
		{"false", false},
		{"null", false},
		{"1", true},
		{"0", false},
		{"${nodes.gate.outputs.passed}", true},
		{"${nodes.gate.outputs.failed}", false},
		{"!${nodes.gate.outputs.failed}", true},
		{"!!${nodes.gate.outputs.passed}", true},
		{"${params.yes}", true},
		{"${params.no}", false},
		{"${params.none}", false},
		{"${params.n}", true},
		{"${nodes.a.outputs.exit_code} == 0", true},
		{"${nodes.a.outputs.exit_code} != 0", false},
		{"${nodes.a.outputs.exit_text} == 0", true}, // text vs number: numeric
		{"0 == ${nodes.a.outputs.exit_text}", true},
		{"${nodes.a.outputs.stdout} == 42", true}, // surrounding space ignored for numbers
		{"${nodes.a.outputs.stdout} > 9", true},   // numerically, not "42\n" > "9"
		{"${nodes.gate.outputs.score} >= 0.9", true},
		{"${params.numstr} > '9'", false}, // two strings: lexical
		{"${params.numstr} > 9", true},
		{"'abc' < 'abd'", true},
		{`"b" == ${nodes.a.outputs.name}`, true},
		{"'x' == 1", false},
		{"'x' != 1", true},
		{"true == 'true'", false}, // different types are never equal
		{"${params.none} == null", true},
		{"${params.none} != null", false},
		{"${params.force} == false", true},
		{"${params.none} == false", false},
		{"${params.list} == ${params.list2}", true},
		{"${params.list} == ${params.map}", false},
		{"${params.map} != ${params.map}", false},
		{"${nodes.eval.outputs.auc} > ${params.limit}", true},
		{"${nodes.eval.outputs.auc} < 0.8 || ${params.force}", false},
		{"${nodes.eval.outputs.auc} < 0.8 || !${params.force}", true},
		{"${params.env} == 'prod' && ${nodes.gate.outputs.passed}", true},
		{"${params.env} == 'prod' && ${nodes.gate.outputs.failed}", false},
		{"true || false && false", true}, // && binds tighter
		{"(true || false) && false", false},
		{"!(${params.n} < 3)", true},
		{"-1 < 0", true},
		{"1.5e3 == 1500", true},
		{"'${params.env}-x' == 'prod-x'", true},        // quoted strings may hold references
		{`'$${params.env}' == "$${params.env}"`, true}, // escaped: literal text
		{`'$${params.env}' == 'prod'`, false},
		{`'it\'s' == "it's"`, true},
		// Short-circuit: the right side is not evaluated, so its missing
		// reference is no error.
		{"true || ${nodes.missing.outputs.x}", true},
		{"false && ${nodes.missing.outputs.x}", false},
	} {
		got, err := EvalWhen(tc.expr, whenScope())
		if err != nil {
			t.Errorf("EvalWhen(%q): %v", tc.expr, err)
			continue
		}
		if got != tc.want {
			t.Errorf("EvalWhen(%q) = %v, want %v", tc.expr, got, tc.want)
		}
	}
}

func TestEvalWhenErrors(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{"${params.maybe}", `${params.maybe} is "maybe", which is not true or false`},
		{"${params.list}", "${params.list} is a list, which is not true or false"},
		{"'text'", `'text' is "text", which is not true or false`},
		{"${params.nan}", "NaN"},
		{"${params.nan} == 1", "NaN cannot be compared"},
		{"${params.env} < 1", "${params.env} < 1: cannot order string \"prod\" and number 1"},
		{"true < false", "cannot order bool true and bool false"},
		{"${params.none} > 0", "cannot order null and number 0"},
		{"${params.list} < ${params.list}", "cannot order list and list"},
		{"${nodes.zz.outputs.x} == 1", `${nodes.zz.outputs.x}: no outputs from node "zz"`},
		{"${params.nope}", `no param "nope"`},
		{"${nodes.a.outputs.x} == 1 || true", `node "a" has no output "x"`},
		{"'${params.nope}' == 'x'", `no param "nope"`},
	} {
		_, err := EvalWhen(tc.expr, whenScope())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("EvalWhen(%q): got error %v, want %q", tc.expr, err, tc.want)
		}
	}
}

func TestParseWhenErrors(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{"a == 1", `position 1: unknown word "a"; quote strings`},
		{"1 = 1", `position 3: unexpected "="; use == to compare`},
		{"true & false", `position 6: unexpected '&'; use && or ||`},
		{"true and false", `unknown word "and"; use &&, || and !`},
		{"(true", `position 6: expected ")", found end of condition`},
		{"true)", `position 5: unexpected ")"`},
		{"1 == 2 == 3", "comparisons do not chain"},
		{"== 1", `position 1: expected a value, found "=="`},
		{"1 ==", "expected a value, found end of condition"},
		{"!", "expected a value"},
		{"${foo}", `unknown reference "${foo}"`},
		{"${params.x", "unterminated reference"},
		{"'abc", "unterminated string"},
		{"5abc", "invalid number"},
		{"1.2.3", "invalid number"},
		{"$x", `unexpected "$"`},
		{"$${params.x}", `unexpected "$"`},
		{"'${bad}'", `unknown reference "${bad}"`},
		{"true true", `unexpected "true"`},
		{"#", `unexpected "#"`},
	} {
		_, err := ParseWhen(tc.expr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseWhen(%q): got error %v, want %q", tc.expr, err, tc.want)
		}
	}
}

func TestWhenRefs(t *testing.T) {
	w, err := ParseWhen("${nodes.a.outputs.x} == 1 && !(${params.p} || 'v${nodes.b.outputs.y}') && ${params.p}")
	if err != nil {
		t.Fatal(err)
	}
	want := []Ref{{"nodes", "a", "x"}, {"params", "p", ""}, {"nodes", "b", "y"}, {"params", "p", ""}}
	if got := w.Refs(); !reflect.DeepEqual(got, want) {
		t.Errorf("Refs = %v, want %v", got, want)
	}
	if w.String() == "" {
		t.Error("String is empty")
	}
	if refs := (&When{}).Refs(); refs != nil {
		t.Errorf("empty condition refs: %v", refs)
	}
}

// Evaluating the same condition many times over a scope built afresh each
// time (new map iteration orders) always gives the same answer.
func TestEvalWhenDeterministic(t *testing.T) {
	const expr = "${params.map} == ${params.map2} && ${nodes.a.outputs.v} > 1"
	for i := 0; i < 200; i++ {
		sc := Scope{
			Params: map[string]any{
				"map":  map[string]any{"a": 1, "b": 2.0, "c": []any{"x"}, "d": nil, "e": true},
				"map2": map[string]any{"e": true, "d": nil, "c": []any{"x"}, "b": 2, "a": 1.0},
			},
			Outputs: map[string]map[string]any{"a": {"v": "3"}},
		}
		got, err := EvalWhen(expr, sc)
		if err != nil || !got {
			t.Fatalf("run %d: %v, %v", i, got, err)
		}
	}
}
