package dags

import (
	"reflect"
	"strings"
	"testing"
)

func runScope() Scope {
	sc := whenScope()
	sc.Params["date"] = "2026-11-23"
	sc.Params["from"] = "2026-02-27"
	sc.Params["to"] = "2026-03-02"
	sc.Params["days"] = "3"
	sc.Run = &RunValues{ID: "daily-1", Pipeline: "ctr", LogicalTime: "2026-11-23T06:00:00+01:00", LogicalDate: "2026-11-23"}
	return sc
}

func TestRunValueRefs(t *testing.T) {
	got, err := Interpolate(map[string]any{
		"id": "${run.id}", "p": "${run.pipeline}", "t": "${run.logical_time}", "d": "${run.logical_date}",
		"mixed": "runs/${run.pipeline}/${run.logical_date}/${run.id}",
	}, runScope())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"id": "daily-1", "p": "ctr", "t": "2026-11-23T06:00:00+01:00", "d": "2026-11-23",
		"mixed": "runs/ctr/2026-11-23/daily-1"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if _, err := Interpolate("${run.foo}", runScope()); err == nil || !strings.Contains(err.Error(), `no run value "foo"`) {
		t.Errorf("unknown run value: %v", err)
	}
	if _, err := Interpolate("${run.id}", whenScope()); err == nil || !strings.Contains(err.Error(), "run values are not known here") {
		t.Errorf("no run values: %v", err)
	}
	if ok, err := EvalWhen(`${run.logical_date} == "2026-11-23" && date_add(${run.logical_date}, 1) == "2026-11-24"`, runScope()); err != nil || !ok {
		t.Errorf("when over run values: %v, %v", ok, err)
	}
}

func TestValueExpressions(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want any
	}{
		{"${date_add(run.logical_date, -1)}", "2026-11-22"},
		{"${date_add(params.date, params.days)}", "2026-11-26"},
		{"${ date_add( run.logical_date , 7 ) }", "2026-11-30"},
		{"day=${date_add(run.logical_date, -1)}/x", "day=2026-11-22/x"},
		{"${date_add('2024-02-28', 1)}", "2024-02-29"},
		{"${date_add('2026-03-29T01:30:00+01:00', 1)}", "2026-03-30T01:30:00+01:00"},
		{"${date_range(params.from, params.to)}", []any{"2026-02-27", "2026-02-28", "2026-03-01", "2026-03-02"}},
		{"${date_range(run.logical_date, run.logical_date)}", []any{"2026-11-23"}},
		{"r=${date_range('2026-01-01', '2026-01-02')}", `r=["2026-01-01","2026-01-02"]`},
		{"${days_between(params.from, params.to)}", 3},
		{"${days_between(params.to, params.from)}", -3},
		{"${days_between('2000-01-01', '9999-12-31')}", 2921939},
		{"${date_format(run.logical_time, '%Y/%m/%d %H:%M:%S %z %j %a %b %u')}", "2026/11/23 06:00:00 +0100 327 Mon Nov 1"},
		{"${date_format(run.logical_date, '%F|%y|%e|%A|%B|%V|%G|%s|%%|%T')}", "2026-11-23|26|23|Monday|November|48|2026|1795392000|%|00:00:00"},
		{"${date_format(run.logical_date, 'dt=%Y-%m-%d/}')}", "dt=2026-11-23/}"}, // a quoted } does not end it
		{"${params.n}", 5},
		{"${params.env == 'prod'}", true},
		{"${nodes.a.outputs.stdout}", "42\n"},
		{"${'$${x}'}", "$${x}"}, // strings inside are plain
		{"$${date_add(run.logical_date, 1)}", "${date_add(run.logical_date, 1)}"},
	} {
		got, err := Interpolate(tc.in, runScope())
		if err != nil {
			t.Errorf("Interpolate(%q): %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Interpolate(%q) = %#v, want %#v", tc.in, got, tc.want)
		}
	}
}

func TestValueExpressionErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"${date_add(run.logical_date)}", "date_add takes 2 arguments, got 1"},
		{"${date_add('2026-13-01', 1)}", `date_add: argument 1 is "2026-13-01", not a date`},
		{"${date_add(params.date, 1.5)}", "date_add: argument 2 is number 1.5, not a whole number"},
		{"${date_add(params.date, 'x')}", `date_add: argument 2 is "x", not a whole number`},
		{"${date_add('9999-12-31', 1)}", "outside years 1 to 9999"},
		{"${date_add(params.date, 99999999)}", "out of range"},
		{"${date_range(params.to, params.from)}", "date_range: 2026-03-02 is after 2026-02-27"},
		{"${date_range('2000-01-01', '2030-01-01')}", "is 10959 days; the limit is 10000"},
		{"${date_format(params.date, '%Q')}", "unknown directive %Q"},
		{"${date_format(params.date, '%')}", "lone %"},
		{"${date_format(params.date, 5)}", "not a layout string"},
		{"${days_between(params.n, params.date)}", "argument 1 is number 5, not a date"},
	} {
		_, err := Interpolate(tc.in, runScope())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Interpolate(%q): got %v, want %q", tc.in, err, tc.want)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"${nope(1)}", `unknown function "nope"`},
		{"${date_add(foo, 1)}", `unknown word "foo"; quote strings, and write references as params.NAME`},
		{"${date_add(${params.date}, 1)}", "unterminated reference"},
		{"${date_add(params.date, 1}", `expected ")"`},
		{"${1 + 2}", `unexpected "+"`},
		{"${'abc}", "unterminated string"},
		{"${" + strings.Repeat("(", 40) + "1" + strings.Repeat(")", 40) + "}", "nested more than 32 deep"},
		{"${date_add('" + strings.Repeat("x", 5000) + "', 1)}", "the limit is 4096"},
		{"${run.foo.bar}", "unknown reference"},
	} {
		if _, err := Refs(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Refs(%q): got %v, want %q", tc.in, err, tc.want)
		}
	}
}

func TestValueExpressionRefs(t *testing.T) {
	refs, err := Refs(map[string]any{
		"a": "${date_range(params.from, nodes.n-1.outputs.day)}",
		"b": "x${date_format(run.logical_time, '%Y')} ${run.id}",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []Ref{{"params", "from", ""}, {"nodes", "n-1", "day"}, {"run", "logical_time", ""}, {"run", "id", ""}}
	if !reflect.DeepEqual(refs, want) {
		t.Errorf("Refs = %v, want %v", refs, want)
	}
	if !HasRef("${date_add('2026-01-01', 1)}") || HasRef("$${date_add('2026-01-01', 1)}") {
		t.Error("HasRef: an expression is a value known at run time; an escaped one is text")
	}
	w, err := ParseWhen(`'${date_add(run.logical_date, -1)}' == ${params.date}`)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := w.Refs(), []Ref{{"run", "logical_date", ""}, {"params", "date", ""}}; !reflect.DeepEqual(got, want) {
		t.Errorf("when refs = %v, want %v", got, want)
	}
}

func TestValidateRunValues(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
		line            int
	}{
		{"ok", three + "  - id: b\n    type: command\n    when: ${run.logical_date} > '2026-01-01'\n    with:\n      argv: [\"${run.id}\", \"${run.pipeline}\", \"${run.logical_time}\", \"${date_add(run.logical_date, -1)}\"]\n", "", 0},
		{"unknown run value", three + "  - id: b\n    type: command\n    with:\n      argv: [\"${run.logical_dat}\"]\n", `node "b" references run.logical_dat, which is not a run value (did you mean "logical_date"?); run values are id, pipeline, logical_time, logical_date`, 11},
		{"unknown run value in when", three + "  - id: b\n    type: noop\n    when: \"${run.foo} == 1\"\n", `node "b" references run.foo, which is not a run value`, 10},
		{"unknown run value in expr", three + "  - id: b\n    type: command\n    with:\n      argv: [\"${date_add(run.day, 1)}\"]\n", `node "b" references run.day, which is not a run value`, 11},
		{"unknown param in expr", three + "  - id: b\n    type: command\n    with:\n      argv: [\"${date_add(params.dat, 1)}\"]\n", `node "b" references params.dat, which is not declared (did you mean "date"?)`, 11},
		{"bad expr", three + "  - id: b\n    type: command\n    with:\n      argv: [\"${date_ad(params.date, 1)}\"]\n", `node "b": with field "argv": [0]: in ${date_ad(params.date, 1)}: position 1: unknown function "date_ad"`, 11},
		// A param with a default is known: the expression is evaluated
		// now, and its value checked against the field's type.
		{"static value", "name: x\nparams:\n  d: {default: '2026-01-01'}\nnodes:\n  - id: a\n    type: train\n    with: {epochs: \"${days_between(params.d, '2026-01-04')}\"}\n", "", 0},
		{"static type", "name: x\nparams:\n  d: {default: '2026-01-01'}\nnodes:\n  - id: a\n    type: train\n    with: {epochs: \"${date_add(params.d, 1)}\"}\n", `with.epochs: ${date_add(params.d, 1)} is a string ("2026-01-02"), want int`, 7},
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
