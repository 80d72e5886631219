package dags

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/internal/number"
)

func testScope() Scope {
	return Scope{
		Params: map[string]any{
			"date":   "2026-01-01",
			"n":      5,
			"ratio":  0.25,
			"big":    1e21,
			"whole":  5.0,
			"flag":   true,
			"none":   nil,
			"tags":   []any{"a", 1.0, true},
			"cfg":    map[string]any{"b": 2.0, "a": "x<y>&z"},
			"dollar": "${params.n}",
		},
		Outputs: map[string]map[string]any{
			"a": {"exit_code": 0.0, "stdout": "hello\n", "rows": 1234567.0, "files": []any{"x", "y"}},
		},
	}
}

func TestInterpolate(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   any
		want any
	}{
		{"plain", "hello", "hello"},
		{"single string", "${params.date}", "2026-01-01"},
		{"single int keeps type", "${params.n}", 5},
		{"single float keeps type", "${nodes.a.outputs.exit_code}", 0.0},
		{"single list keeps type", "${params.tags}", []any{"a", 1.0, true}},
		{"single map keeps type", "${params.cfg}", map[string]any{"b": 2.0, "a": "x<y>&z"}},
		{"single null", "${params.none}", nil},
		{"single bool", "${params.flag}", true},
		{"mixed", "d=${params.date} n=${params.n}", "d=2026-01-01 n=5"},
		{"float formatting", "${params.ratio}/${params.whole}/${nodes.a.outputs.rows}", "0.25/5/1234567"},
		{"big float", "x${params.big}", "x1e+21"},
		{"bool and null", "[${params.flag}][${params.none}]", "[true][]"},
		{"list as json", "tags=${params.tags}", `tags=["a",1,true]`},
		{"map as json, sorted, unescaped", "cfg=${params.cfg}", `cfg={"a":"x<y>&z","b":2}`},
		{"spaces make it a string", " ${params.n}", " 5"},
		{"escape", "$${params.n}", "${params.n}"},
		{"escape then ref", "$${x} ${params.n}", "${x} 5"},
		{"lone dollars", "$ $$ $5 $x", "$ $$ $5 $x"},
		{"triple dollar", "$$${params.n}", "$${params.n}"},
		{"value with ref is not re-expanded", "${params.dollar}", "${params.n}"},
		{"nested", map[string]any{
			"argv": []any{"echo", "${params.date}", "${nodes.a.outputs.stdout}"},
			"env":  map[string]any{"N": "${params.n}", "deep": []any{map[string]any{"x": "${params.ratio}"}}},
			"num":  3,
			"nil":  nil,
		}, map[string]any{
			"argv": []any{"echo", "2026-01-01", "hello\n"},
			"env":  map[string]any{"N": 5, "deep": []any{map[string]any{"x": 0.25}}},
			"num":  3,
			"nil":  nil,
		}},
		{"string slice", []string{"${params.n}", "x"}, []any{5, "x"}},
		{"string map", map[string]string{"k": "${params.date}"}, map[string]any{"k": "2026-01-01"}},
		{"non-string scalars pass", 42, 42},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Interpolate(tc.in, testScope())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %#v, want %#v", got, tc.want)
			}
		})
	}
}

func TestInterpolateErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   any
		want string
	}{
		{"missing param", "${params.nope}", `${params.nope}: no param "nope"`},
		{"missing node", "x ${nodes.b.outputs.x}", `${nodes.b.outputs.x}: no outputs from node "b"`},
		{"missing output", "${nodes.a.outputs.nope}", `${nodes.a.outputs.nope}: node "a" has no output "nope"`},
		{"bad form", "${foo}", `unknown reference "${foo}"; use ${params.NAME} or ${nodes.ID.outputs.KEY}`},
		{"unterminated", "${params.n", `unterminated reference "${params.n"`},
		{"path in error", map[string]any{"argv": []any{"ok", "${params.nope}"}}, `argv[1]: ${params.nope}: no param "nope"`},
		{"first error by key order", map[string]any{"b": "${params.y}", "a": "${params.x}"}, `a: ${params.x}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Interpolate(tc.in, testScope())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestInterpolateDoesNotMutateOrAlias(t *testing.T) {
	in := map[string]any{"argv": []any{"${params.n}"}, "l": "${params.tags}"}
	before, _ := json.Marshal(in)
	sc := testScope()
	out, err := Interpolate(in, sc)
	if err != nil {
		t.Fatal(err)
	}
	if after, _ := json.Marshal(in); string(after) != string(before) {
		t.Errorf("input changed: %s -> %s", before, after)
	}
	// Changing the result must not reach the scope.
	out.(map[string]any)["l"].([]any)[0] = "changed"
	if sc.Params["tags"].([]any)[0] != "a" {
		t.Error("result aliases the scope")
	}
}

func TestRefs(t *testing.T) {
	v := map[string]any{
		"z":    "${params.a}",
		"argv": []any{"x ${nodes.n1.outputs.k} ${params.b}", "$${params.not}", 5},
		"m":    map[string]any{"k": "${nodes.n-2.outputs.out_put}"},
	}
	got, err := Refs(v)
	if err != nil {
		t.Fatal(err)
	}
	want := []Ref{
		{Kind: "nodes", Name: "n1", Key: "k"},
		{Kind: "params", Name: "b"},
		{Kind: "nodes", Name: "n-2", Key: "out_put"},
		{Kind: "params", Name: "a"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if s := want[0].String(); s != "${nodes.n1.outputs.k}" {
		t.Errorf("String: %s", s)
	}
	for _, bad := range []string{"${}", "${params}", "${params.}", "${params.a.b}", "${nodes.a}", "${nodes.a.output.k}", "${nodes.1a.outputs.k}", "${env.X}"} {
		if _, err := Refs(bad); err == nil || !strings.Contains(err.Error(), "unknown reference") {
			t.Errorf("Refs(%q): got %v, want an unknown reference error", bad, err)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{5, "5"}, {int64(-7), "-7"}, {5.0, "5"}, {0.25, "0.25"}, {-0.5, "-0.5"}, {1e20, "100000000000000000000"},
		{1e21, "1e+21"}, {1e-7, "1e-7"}, {1.5e-10, "1.5e-10"}, {0.000123, "0.000123"}, {float32(1.5), "1.5"}, {json.Number("12.50"), "12.50"},
		{true, "true"}, {nil, ""}, {"s", "s"}, {[]any{}, "[]"}, {map[string]any{}, "{}"},
	} {
		got, err := format(tc.v)
		if err != nil || got != tc.want {
			t.Errorf("format(%#v) = %q, %v; want %q", tc.v, got, err, tc.want)
		}
	}
}

func TestNumbers(t *testing.T) {
	for _, tc := range []struct {
		v     any
		f     float64
		i     int64
		isInt bool
	}{
		{int(3), 3, 3, true}, {int8(-3), -3, -3, true}, {int16(3), 3, 3, true}, {int32(3), 3, 3, true},
		{int64(3), 3, 3, true}, {uint(3), 3, 3, true}, {uint8(3), 3, 3, true}, {uint16(3), 3, 3, true},
		{uint32(3), 3, 3, true}, {uint64(3), 3, 3, true}, {float32(2.5), 2.5, 0, false}, {4.0, 4, 4, true},
		{json.Number("7"), 7, 7, true}, {json.Number("7.5"), 7.5, 0, false}, {uint64(1 << 63), 1 << 63, 0, false},
		{1e19, 1e19, 0, false},
	} {
		f, ok := number.Of(tc.v)
		if !ok || f != tc.f {
			t.Errorf("number.Of(%T %v) = %v, %v", tc.v, tc.v, f, ok)
		}
		i, ok := toInt64(tc.v)
		if ok != tc.isInt || ok && i != tc.i {
			t.Errorf("toInt64(%T %v) = %v, %v; want %v, %v", tc.v, tc.v, i, ok, tc.i, tc.isInt)
		}
	}
	for _, v := range []any{"1", true, nil, []any{}} {
		if _, ok := number.Of(v); ok {
			t.Errorf("number.Of(%#v) ok", v)
		}
	}
}

func TestRefsGoTypes(t *testing.T) {
	got, err := Refs(map[string]any{"l": []string{"${params.a}"}, "m": map[string]string{"k": "${params.b}"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []Ref{{Kind: "params", Name: "a"}, {Kind: "params", Name: "b"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if _, err := Refs([]string{"ok", "${bad}"}); err == nil || !strings.Contains(err.Error(), "[1]: unknown reference") {
		t.Errorf("Refs: %v", err)
	}
	if _, err := Refs(map[string]string{"k": "${bad}"}); err == nil || !strings.Contains(err.Error(), "k: unknown reference") {
		t.Errorf("Refs: %v", err)
	}
}

// TestHasRef: a value holds a reference when a string in it does; an
// escaped "$${" is literal text and an unterminated "${" still counts.
func TestHasRef(t *testing.T) {
	for _, v := range []any{
		"${params.a}", "x-${nodes.n.outputs.k}-y", "${oops", "$${x} and ${params.a}",
		[]any{1, "${params.a}"}, map[string]any{"k": []any{"${params.a}"}},
		[]string{"${params.a}"}, map[string]string{"k": "${params.b}"},
	} {
		if !HasRef(v) {
			t.Errorf("HasRef(%#v) = false", v)
		}
	}
	for _, v := range []any{"plain", "$${params.a}", "$5", "", nil, 3, []any{"a", 1}, map[string]any{"k": "v"}} {
		if HasRef(v) {
			t.Errorf("HasRef(%#v) = true", v)
		}
	}
}
