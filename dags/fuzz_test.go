package dags

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/expr-lang/expr/file"
)

// Seeds shared by the fuzz targets: every condition the tests use.
var whenSeeds = []string{
	"", "true", "null", "1", "-1 < 0", "1.5e3 == 1500", "!(${params.n} < 3)",
	"!!${nodes.gate.outputs.passed}", "${params.yes}",
	"${nodes.a.outputs.exit_code} == 0", "${nodes.a.outputs.stdout} > 9",
	"${params.numstr} > '9'", "true == 'true'", "${params.list} == ${params.list2}",
	"${nodes.eval.outputs.auc} < 0.8 || !${params.force}",
	"${params.env} == 'prod' && ${nodes.gate.outputs.passed}",
	"(true || false) && false", "'${params.env}-x' == 'prod-x'",
	`'$${params.env}' == "$${params.env}"`, `'it\'s' == "it's"`,
	"true || ${nodes.missing.outputs.x}", "${params.nan} == 1", "true < false",
	"a == 1", "1 = 1", "true & false", "true and false", "(true", "true)",
	"1 == 2 == 3", "== 1", "1 ==", "!", "${foo}", "${params.x", "'abc", "5abc",
	"1.2.3", "$x", "$${params.x}", "'${bad}'", "true true", "#", "!${params.n} < 3",
	"(1 == 2) == false", "${params.map} != ${params.map}", "[1]", "a.b", "len('x')",
	"${run.logical_date} == '2026-11-23'", "date_add(${run.logical_date}, -1) < ${params.env}",
	"days_between('2026-01-01', ${params.env}) > 3", "date_format('2026-01-01', '%Y') == '2026'",
	"'${date_add(run.logical_date, 1)}' == 'x'", "date_range('2026-01-01', '2026-01-03') == null",
}

// Seeds with ${...} expressions and run values, for the value targets.
var exprSeeds = []string{
	"${run.id}", "${run.logical_date}", "${run.foo}", "x-${run.logical_time}-y",
	"${date_add(run.logical_date, -1)}", "${date_add(params.n, 1)}", "${ params.env }",
	"${date_range('2026-01-01', '2026-01-05')}", "d=${date_range(params.env, '2026-01-05')}",
	"${date_format('2026-01-01T10:00:00+02:00', '%Y/%m/%d %H %z %%')}", "${days_between('2026-01-01', '2025-12-01')}",
	"${date_format(nodes.a.outputs.stdout, '}')}", "${params.n == 5}", "${'a}'}", "${'}", "${nope(1)}",
	"${date_add('2026-01-01', 'x')}", "${item}", "${item_index}", "${date_add(item, item_index)}",
}

// FuzzWhen: parsing any text either fails with a message or gives a
// condition whose evaluation never panics, always gives the same answer,
// and fails only with this language's own messages.
func FuzzWhen(f *testing.F) {
	for _, s := range whenSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		w, err := ParseWhen(src)
		if err != nil {
			if w != nil {
				t.Fatalf("ParseWhen(%q) gave a condition and an error", src)
			}
			if err.Error() == "" {
				t.Fatalf("ParseWhen(%q): empty error", src)
			}
			return
		}
		if w.String() != src {
			t.Fatalf("String() = %q, want %q", w.String(), src)
		}
		for _, r := range w.Refs() {
			if !strings.Contains(src, r.String()) && !strings.Contains(src, r.Kind+".") && !strings.Contains(src, r.Name) {
				t.Fatalf("ParseWhen(%q): ref %v not in the source", src, r)
			}
		}
		got, err := w.Eval(whenScope())
		again, err2 := w.Eval(whenScope())
		if got != again || (err == nil) != (err2 == nil) || err != nil && err.Error() != err2.Error() {
			t.Fatalf("Eval(%q) not deterministic: %v, %v then %v, %v", src, got, err, again, err2)
		}
		var fe *file.Error
		if errors.As(err, &fe) {
			t.Fatalf("Eval(%q): expr's own error leaked: %v", src, err)
		}
	})
}

// FuzzInterpolate: a string interpolates without panics, deterministically,
// and fails to parse exactly when Refs (which validation uses) rejects it.
func FuzzInterpolate(f *testing.F) {
	for _, s := range []string{"", "x", "${params.env}", "a-${params.n}-b", "$${params.env}", "${params.list}",
		"${nodes.a.outputs.stdout}", "${params.nope}", "${params.x", "${foo}", "$$", "${}", "${params.map}x", "${params.nan}"} {
		f.Add(s)
	}
	for _, s := range whenSeeds {
		f.Add(s)
	}
	for _, s := range exprSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		in := map[string]any{"s": s, "l": []any{s, map[string]any{s: s}}}
		refs, rerr := Refs(in)
		got, err := Interpolate(in, whenScope())
		again, err2 := Interpolate(in, whenScope())
		if (err == nil) != (err2 == nil) || err == nil && fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", again) {
			t.Fatalf("Interpolate(%q) not deterministic", s)
		}
		if rerr != nil {
			if err == nil {
				t.Fatalf("Refs(%q) failed (%v) but Interpolate succeeded", s, rerr)
			}
			return
		}
		resolvable := true
		for _, r := range refs {
			if _, lerr := whenScope().lookup(r); lerr != nil {
				resolvable = false
			}
		}
		// An expression may fail on values that resolve (a date function
		// given a number), with its own message.
		if resolvable && err != nil && !strings.Contains(err.Error(), "finite") && !hasExpr(s) {
			t.Fatalf("Interpolate(%q): every ref resolves but: %v", s, err)
		}
		if err == nil {
			if _, jerr := json.Marshal(got); jerr != nil && !strings.Contains(jerr.Error(), "NaN") {
				t.Fatalf("Interpolate(%q) gave a value JSON cannot hold: %v", s, jerr)
			}
		}
	})
}

// FuzzParseSpec: any bytes parse, validate and compile without panics or
// hangs; a spec that validates and needs no params compiles to a plan that
// is JSON and whose conditions parse.
func FuzzParseSpec(f *testing.F) {
	seeds, _ := filepath.Glob("examples/*.yaml")
	for _, p := range seeds {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(exampleSpec))
	f.Add([]byte(scoreSpec + "  - id: use\n    type: train\n    needs: [score]\n    when: ${nodes.score.outputs.ok}\n" +
		"    with: {epochs: \"${nodes.score.outputs.epochs}\", lr: \"${nodes.score.outputs.auc}\"}\n"))
	for _, s := range whenSeeds {
		f.Add([]byte("name: x\nnodes:\n  - id: a\n    type: command\n    with: {argv: [x]}\n  - id: b\n    type: noop\n    needs: [a]\n    when: '" + strings.ReplaceAll(s, "'", "''") + "'\n"))
	}
	for _, s := range exprSeeds {
		f.Add([]byte("name: x\nparams:\n  d: {default: '2026-01-01'}\nnodes:\n  - id: a\n    type: command\n    with: {argv: [x]}\n" +
			"  - id: b\n    type: train\n    needs: [a]\n    with:\n      epochs: '${days_between(params.d, \"2026-01-03\")}'\n      extra: '" + strings.ReplaceAll(s, "'", "''") + "'\n"))
	}
	f.Add([]byte(waitSpec))
	f.Add([]byte(readySpec))
	f.Add([]byte("name: x\nschedules:\n  - {id: s, cron: '0 */2 * * *', when_ready: yes, earliest: '25:61'}\n  - {id: t, every: 1h, earliest: '00:00'}\nnodes: [{id: a, type: noop}]\n"))
	f.Add([]byte("name: x\nwait_for: [{files: '/d/${run.logical_date}/*', marker: _SUCCESS, deadline: 1h, poll: 2h}]\nnodes:\n  - {id: a, type: noop, wait_for: [{command: [x], deadline: 0s, on_deadline: later}]}\n"))
	f.Add([]byte("name: x\nx: &a [*a]\nnodes: [{id: a, type: noop, with: {v: *a}}]\n"))
	f.Add([]byte("name: x\nnodes:\n  - &n {id: a, type: noop}\n  - {<<: *n, id: b, needs: [a]}\n"))
	reg := testRegistry(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse("fuzz.yaml", data)
		if err != nil {
			if _, err2 := Parse("fuzz.yaml", data); err2 == nil || err2.Error() != err.Error() {
				t.Fatalf("Parse not deterministic: %v then %v", err, err2)
			}
			return
		}
		verr := s.Validate(reg)
		plan, cerr := Compile(s, reg, nil)
		if verr != nil {
			if cerr == nil {
				t.Fatalf("Validate failed (%v) but Compile succeeded", verr)
			}
			return
		}
		required := false
		for _, p := range s.Params {
			required = required || p.Required
		}
		if cerr != nil {
			if !required {
				t.Fatalf("Validate passed, no required params, but Compile: %v", cerr)
			}
			return
		}
		out, err := json.Marshal(plan)
		if err != nil {
			t.Fatalf("plan is not JSON: %v", err)
		}
		var back Plan
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("plan JSON does not decode: %v", err)
		}
		for _, n := range plan.Nodes {
			if _, err := ParseWhen(n.When); err != nil {
				t.Fatalf("compiled when %q does not parse: %v", n.When, err)
			}
		}
	})
}

// hasExpr reports whether s holds a ${...} expression (not a plain reference).
func hasExpr(s string) bool {
	t, err := parseTemplate(s)
	if err != nil {
		return false
	}
	for _, seg := range t {
		if seg.expr != nil {
			return true
		}
	}
	return false
}
