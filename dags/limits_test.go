package dags

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The input that used to kill the worker: ~600 KB of "(" in a condition
// overflowed the recursive parser's stack (a fatal error no recover
// catches). Now it is refused up front, in every way a spec reaches the
// parser.
func TestWhenPoisonPill(t *testing.T) {
	poison := strings.Repeat("(", 600<<10)
	start := time.Now()
	if _, err := ParseWhen(poison); err == nil || !strings.Contains(err.Error(), "condition is 614400 bytes long; the limit is 4096") {
		t.Errorf("ParseWhen: %v", err)
	}
	spec := "name: x\nnodes:\n  - id: a\n    type: noop\n    when: \"" + poison + "\"\n"
	s := mustParse(t, spec)
	checkError(t, s.Validate(testRegistry(t)), `node "a": when: condition is 614400 bytes long; the limit is 4096`, 5)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("refusing it took %v", d)
	}
}

func TestWhenLimits(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"too long", strings.Repeat("true && ", 600) + "true", "bytes long; the limit is 4096"},
		{"too deep", strings.Repeat("(", 33) + "true" + strings.Repeat(")", 33), "position 33: brackets nested more than 32 deep"},
		{"too deep, unclosed", strings.Repeat("[", 40), "brackets nested more than 32 deep"},
		{"too many nodes", strings.Repeat("1&&", 1200) + "1", "condition has more than 1000 parts"},
		{"long unterminated string", "'" + strings.Repeat("x", 100), "unterminated string 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx..."},
	} {
		if _, err := ParseWhen(tc.src); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
	ok := strings.Repeat("(", 32) + "true" + strings.Repeat(")", 32)
	if got, err := EvalWhen(ok, whenScope()); err != nil || !got {
		t.Errorf("32 brackets deep: %v, %v", got, err)
	}
	// Under the length limit, a tree as deep as it is long: bounded by the
	// node budget.
	if got, err := EvalWhen(strings.Repeat("!", 998)+"true", whenScope()); err != nil || !got {
		t.Errorf("998 nots: %v, %v", got, err)
	}
	if _, err := EvalWhen(strings.Repeat("!", 4000)+"true", whenScope()); err == nil || !strings.Contains(err.Error(), "more than 1000 parts") {
		t.Errorf("4000 nots: %v", err)
	}
}

// Only this language parses: what expr would accept beyond it is refused,
// naming what was found.
func TestWhenRefusesOtherSyntax(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{"${params.map}.a == 1", `position 14: unexpected "."`},
		{"${params.map}['a'] == 1", `unexpected "["`},
		{"1 + 1 == 2", `position 3: unexpected "+"`},
		{"x + 1 == 2", `position 1: unknown word "x"`},
		{"[1] == [1]", `position 1: unexpected "["`},
		{"{a: 1}", `unexpected "{"`},
		{"1 in [1]", `unexpected "in"`},
		{"nil", `unknown word "nil"`},
		{"'a' matches 'b'", `unexpected "matches"`},
		{"true ? 1 : 2", `unexpected`},
		{"let x = 1; x", `position 5: unexpected "x"`},
		{"$env", `unexpected "$"`},
		{"${params.n} ?? 1", `unexpected "??"`},
		{"not true", `unknown word "not"; use &&, || and !`},
		{"true or false", `unknown word "or"; use &&, || and !`},
		{"len('x') == 1", `unknown function "len"`},
		{"now() > 1", `unknown function "now"`},
		{"${params.n}(1)", `unexpected "("`},
		{"${params.a}${params.b}", `position 12: unexpected "${params.b}"`},
		{"-${params.n} < 0", `unexpected "-"`},
		{`'a\qb' == 'x'`, "invalid escape in string"},
		{"true // ${params.n}", `position 6: unexpected "/"`},
		{"1 / 1 == 1", `position 3: unexpected "/"`},
		{"if true { 1 } else { 2 }", `position 4: unexpected "true"`},
	} {
		_, err := ParseWhen(tc.expr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseWhen(%q): got error %v, want %q", tc.expr, err, tc.want)
		}
	}
}

// "!" applies to a whole comparison, as it always has in this language,
// although expr binds it tighter; brackets still say otherwise.
func TestWhenNotAndComparison(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want bool
	}{
		{"!${params.n} < 3", true},           // !(5 < 3)
		{"!!${params.n} < 3", false},         // !!(5 < 3)
		{"!(${params.n} < 3) == true", true}, // bracketed: (!(5 < 3)) == true
		{"(1 == 2) == false", true},          // a bracketed comparison is a value
		{"false == (1 == 2)", true},
		{"${params.n} == 5 && !${params.force}", true},
	} {
		got, err := EvalWhen(tc.expr, whenScope())
		if err != nil || got != tc.want {
			t.Errorf("EvalWhen(%q) = %v, %v; want %v", tc.expr, got, err, tc.want)
		}
	}
	if _, err := EvalWhen("(!${params.n}) < 3", whenScope()); err == nil || !strings.Contains(err.Error(), "cannot order bool false and number 3") {
		t.Errorf("bracketed not: %v", err)
	}
}

// The language grows by registering functions: a registered function gets
// evaluated arguments (references resolved), its errors fail the
// evaluation with its own message, and references in its arguments are
// collected for validation.
func TestWhenFuncs(t *testing.T) {
	funcs := map[string]WhenFunc{
		"upper": func(args ...any) (any, error) {
			if len(args) != 1 {
				return nil, fmt.Errorf("upper takes 1 argument, got %d", len(args))
			}
			s, ok := args[0].(string)
			if !ok {
				return nil, fmt.Errorf("upper: %s is not a string", typeName(args[0]))
			}
			return strings.ToUpper(s), nil
		},
	}
	w, err := parseWhen("upper(${params.env}) == 'PROD' && upper('${nodes.a.outputs.name}x') == 'BX'", funcs)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := w.Eval(whenScope()); err != nil || !got {
		t.Errorf("Eval: %v, %v", got, err)
	}
	if got, want := fmt.Sprint(w.Refs()), "[${params.env} ${nodes.a.outputs.name}]"; got != want {
		t.Errorf("Refs = %s, want %s", got, want)
	}
	w, err = parseWhen("upper(${params.n}) == 'X'", funcs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Eval(whenScope()); err == nil || err.Error() != "upper: number is not a string" {
		t.Errorf("function error: %v", err)
	}
	if _, err := parseWhen("upper(nope) == 'X'", funcs); err == nil || !strings.Contains(err.Error(), `unknown word "nope"`) {
		t.Errorf("bad argument: %v", err)
	}
}

func TestSpecLimits(t *testing.T) {
	big := "name: x\ndescription: \"" + strings.Repeat("x", maxSpecBytes) + "\"\nnodes: [{id: a, type: noop}]\n"
	if _, err := Parse("test.yaml", []byte(big)); err == nil || !strings.Contains(err.Error(), "the limit is 1048576 (1 MiB)") {
		t.Errorf("big spec: %v", err)
	}
	var b strings.Builder
	b.WriteString("name: x\nnodes:\n")
	for i := range maxNodes + 1 {
		fmt.Fprintf(&b, "  - {id: n%d, type: noop}\n", i)
	}
	_, err := Parse("test.yaml", []byte(b.String()))
	checkError(t, err, "too many nodes: 5001 with on_failure; the limit is 5000", 3)

	// YAML nesting: yaml.v3 stops at 10,000 levels, with an error.
	deep := "name: x\nnodes: [{id: a, type: noop, with: {v: " + strings.Repeat("[", 600<<10) + "}}]\n"
	checkError(t, parseErr("test.yaml", deep), "exceeded max depth of 10000", 0)
	// Our walk stops at maxDepth.
	nested := "name: x\nnodes: [{id: a, type: noop, with: {v: " + strings.Repeat("[", 100) + strings.Repeat("]", 100) + "}}]\n"
	checkError(t, parseErr("test.yaml", nested), "is nested too deeply", 0)
	// Aliases that expand to a billion values.
	laughs := "name: x\nx:\n  l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n"
	for i := 1; i <= 9; i++ {
		p := fmt.Sprintf("*l%d", i-1)
		laughs += fmt.Sprintf("  l%d: &l%d [%s]\n", i, i, strings.Repeat(p+", ", 9)+p)
	}
	laughs += "nodes: [{id: a, type: noop, with: {v: *l9}}]\n"
	start := time.Now()
	checkError(t, parseErr("test.yaml", laughs), "values after expanding aliases", 0)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("refusing the alias bomb took %v", d)
	}
	// The same with merge keys: each anchor's merged mapping is built once
	// (parser.merged), so ten levels of ten merges each cost ten
	// expansions, not 10^10, and the node gets the one key they hold.
	merges := "name: x\nnodes: [{id: a, type: noop, with: {l0: &l0 {k: 1}, "
	for i := 1; i <= 9; i++ {
		p := fmt.Sprintf("*l%d", i-1)
		merges += fmt.Sprintf("l%d: &l%d {<<: [%s]}, ", i, i, strings.Repeat(p+", ", 9)+p)
	}
	merges += "v: *l9}}]\n"
	start = time.Now()
	s, err := Parse("test.yaml", []byte(merges))
	if err != nil {
		t.Fatalf("merge chain: %v", err)
	}
	if v, _ := s.Nodes[0].With["v"].(map[string]any); len(v) != 1 || v["k"] != 1 {
		t.Errorf("merge chain gave v = %v, want {k: 1}", s.Nodes[0].With["v"])
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the merge chain took %v", d)
	}
}

func parseErr(file, src string) error {
	_, err := Parse(file, []byte(src))
	return err
}

// maxNodesSpec is a spec at the node limit: a chain, each node's condition
// and with referring to the one before (the worst case for upstream checks).
func maxNodesSpec() []byte {
	var b strings.Builder
	b.WriteString("name: x\nnodes:\n  - {id: n0, type: command, with: {argv: [x]}}\n")
	for i := 1; i < maxNodes; i++ {
		fmt.Fprintf(&b, "  - {id: n%d, type: command, needs: [n%d], when: \"${nodes.n%d.outputs.exit_code} == 0\", with: {argv: [\"${nodes.n%d.outputs.stdout}\"]}}\n", i, i-1, i-1, i-1)
	}
	return []byte(b.String())
}

// A spec at the node limit is accepted.
func TestSpecAtNodeLimit(t *testing.T) {
	s := mustParse(t, string(maxNodesSpec()))
	plan, err := Compile(s, testRegistry(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Nodes) != maxNodes {
		t.Errorf("%d nodes", len(plan.Nodes))
	}
}

// BenchmarkCompileAtNodeLimit measures parse + validate + compile of a spec
// at the node limit, the most work one spec can cost a worker:
//
//	go test ./dags/ -run '^$' -bench CompileAtNodeLimit -benchtime 3x
func BenchmarkCompileAtNodeLimit(b *testing.B) {
	data := maxNodesSpec()
	reg := testRegistry(b)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		s, err := Parse("bench.yaml", data)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Compile(s, reg, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEvalWhen measures parsing and evaluating one typical condition,
// which the workflow does for each node that has one.
func BenchmarkEvalWhen(b *testing.B) {
	sc := whenScope()
	for b.Loop() {
		if _, err := EvalWhen("${nodes.eval.outputs.auc} >= ${params.limit} && ${params.env} == 'prod'", sc); err != nil {
			b.Fatal(err)
		}
	}
}
