package dags

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/expr-lang/expr"
)

// amplify is the param: one 43-byte expression that gives ~130 KB,
// repeated to size bytes.
func amplify(size int) string {
	const one = "${date_range('2000-01-01','2027-01-01')}"
	return strings.Repeat(one, size/len(one))
}

const ampSpec = `name: amp
params:
  p: {type: string, default: x}
nodes:
  - id: a
    type: noop
`

// allocated runs fn and reports the bytes it allocated and how long it took.
func allocated(fn func()) (uint64, time.Duration) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	fn()
	d := time.Since(start)
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, d
}

// The two params, refused by Compile (the resolve step, so the run
// fails as InvalidPipeline before it starts), naming the param and the
// limit, at a cost that does not grow with what the text asks for. Before
// the limits, evaluating the 40 KB one allocated 1.4 GB over 14 s and gave
// 131 MB; the 845-byte one gave 2.7 MB, past the 2 MiB payload limit.
func TestCompileRefusesAmplifyingParam(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value string
		want  string
	}{
		{"40 KB", amplify(40 << 10), `param "p": more than 32 ${...} expressions in one value`},
		{"845 bytes", amplify(845), `param "p": ${date_range('2000-01-01','2027-01-01')}: the value would be over 256 KiB (262144 bytes)`},
	} {
		s := mustParse(t, ampSpec)
		var err error
		alloc, d := allocated(func() { _, err = Compile(s, testRegistry(t), map[string]any{"p": tc.value}) })
		checkError(t, err, tc.want, 3)
		t.Logf("%s: refused in %v, %d KB allocated", tc.name, d, alloc>>10)
		if alloc > 32<<20 {
			t.Errorf("%s: refusing it allocated %d MB", tc.name, alloc>>20)
		}
	}
}

// A spec's own default is a param value too.
func TestCompileRefusesAmplifyingDefault(t *testing.T) {
	spec := strings.Replace(ampSpec, "default: x", `default: "`+amplify(300)+`"`, 1)
	_, err := Compile(mustParse(t, spec), testRegistry(t), nil)
	checkError(t, err, `param "p": ${date_range('2000-01-01','2027-01-01')}: the value would be over 256 KiB`, 3)
}

// A value holding ${...} that is larger than any value may become is
// refused before it is parsed, run values or not.
func TestCompileRefusesHugeParamText(t *testing.T) {
	big := strings.Repeat("${run.id}", MaxValueBytes/9+1)
	_, err := Compile(mustParse(t, ampSpec), testRegistry(t), map[string]any{"p": big})
	checkError(t, err, `param "p": a value holding ${...} is 262152 bytes; the limit is 256 KiB`, 3)
}

// A param that uses run values is known only in the run: Compile lets it
// through, and ResolveRunParams stops at the same limit with a LimitError.
func TestResolveRunParamsBounded(t *testing.T) {
	p := strings.Repeat("${date_range(run.logical_date, '2030-01-01')}", 3)
	if _, err := Compile(mustParse(t, ampSpec), testRegistry(t), map[string]any{"p": p}); err != nil {
		t.Fatalf("Compile: %v", err)
	}
	_, _, err := ResolveRunParams(map[string]any{"p": p}, &RunValues{LogicalDate: "2005-01-01"})
	var le *LimitError
	if !errors.As(err, &le) || !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), `param "p": `) {
		t.Fatalf("err = %v, want a LimitError naming the param", err)
	}
	// Within the limit, each param alone, but not all of them together.
	params := map[string]any{}
	for i := range 9 {
		params[fmt.Sprintf("p%d", i)] = "${date_range(run.logical_date, '2030-01-01')}"
	}
	_, _, err = ResolveRunParams(params, &RunValues{LogicalDate: "2005-01-01"})
	if err == nil || !strings.Contains(err.Error(), "everything resolved together would be over 1 MiB") {
		t.Fatalf("nine params: err = %v", err)
	}
	delete(params, "p8")
	if _, _, err := ResolveRunParams(params, &RunValues{LogicalDate: "2005-01-01"}); err != nil {
		t.Fatalf("eight params: %v", err)
	}
}

// Templates stop at MaxValueBytes as they grow; a plain reference passes a
// value on unchanged and counts only toward the whole.
func TestInterpolateBounded(t *testing.T) {
	big := strings.Repeat("x", 220<<10)
	sc := Scope{Params: map[string]any{"big": big, "list": []any{big, big}}}
	for _, tc := range []struct {
		name string
		v    any
		want string // "" for success
	}{
		{"one reference", "${params.big}", ""},
		{"a list by reference", "${params.list}", ""},
		{"text around one", "<${params.big}>", ""},
		{"two in one string", "${params.big}${params.big}", "${params.big}: the value would be over 256 KiB"},
		{"a list in text", "list: ${params.list}", "${params.list}: the value would be over 256 KiB"},
		{"five references", map[string]any{"a": "${params.big}", "b": "${params.big}", "c": "${params.big}", "d": "${params.big}", "e": "${params.big}"},
			"e: everything resolved together would be over 1 MiB"},
		{"in a list", []any{"${params.list}", "${params.list}", "${params.list}"}, "[2]: everything resolved together would be over 1 MiB"},
	} {
		_, err := Interpolate(tc.v, sc)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrTooLarge)):
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}

// A function's result is sized before anything uses it, and the functions
// of one evaluation share a budget, whether their results are returned or
// only compared.
func TestExpressionFunctionsBounded(t *testing.T) {
	funcs := whenFuncs()
	funcs["big"] = func(...any) (any, error) { return strings.Repeat("y", MaxValueBytes), nil }
	w, err := parseWhen("big() == 'x'", funcs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Eval(Scope{}); err == nil || !strings.Contains(err.Error(), "what big gives would be over 256 KiB") {
		t.Errorf("big(): %v", err)
	}

	pair := "date_range('2000-01-01','2027-01-01') == date_range('2000-01-01','2027-01-01')"
	eight := strings.Repeat(pair+" && ", 7) + pair // 16 lists, ~2 MB
	if ok, err := EvalWhen(eight, Scope{}); err != nil || !ok {
		t.Fatalf("eight comparisons: %v, %v", ok, err)
	}
	nine := eight + " && " + pair
	if _, err := EvalWhen(nine, Scope{}); err == nil || !strings.Contains(err.Error(), "what the expressions' functions give together would be over 2 MiB") {
		t.Errorf("nine comparisons: %v", err)
	}
	// The same inside a value: each ${...} of a string shares the string's budget.
	v := strings.Repeat("${"+pair+"}", 9)
	if _, err := Interpolate(v, Scope{}); err == nil || !errors.Is(err, ErrTooLarge) {
		t.Errorf("nine comparisons in a value: %v", err)
	}
}

func TestTemplateExpressionCount(t *testing.T) {
	ok := strings.Repeat("${date_add('2026-01-01', 1)}", maxTemplateExprs)
	if _, err := parseTemplate(ok + "${params.x}${run.id}"); err != nil {
		t.Fatalf("%d expressions and references: %v", maxTemplateExprs, err)
	}
	if _, err := parseTemplate(ok + "${date_add('2026-01-01', 2)}"); err == nil || !strings.Contains(err.Error(), "more than 32 ${...} expressions in one value") {
		t.Errorf("one more: %v", err)
	}
}

// expr's own memory budget is set on every run: a program that makes a
// range (syntax this language refuses, so built here directly) stops.
func TestExprMemoryBudget(t *testing.T) {
	prog, err := expr.Compile("1..100000")
	if err != nil {
		t.Fatal(err)
	}
	w := &When{src: "1..100000", prog: prog, value: true}
	if _, err := w.evalValue(Scope{}); err == nil || !strings.Contains(err.Error(), "memory budget exceeded") {
		t.Errorf("err = %v, want expr's memory budget", err)
	}
}

// sizeOf stops counting once past its limit: refusing a huge value costs
// what refusing a value just past the limit does.
func TestSizeOfStopsEarly(t *testing.T) {
	huge := make([]any, 1<<16)
	for i := range huge {
		huge[i] = "2026-01-01"
	}
	if n := sizeOf(huge, 1000); n <= 1000 || n > 1100 {
		t.Errorf("sizeOf = %d, want just past 1000", n)
	}
	for _, tc := range []struct {
		v    any
		want int
	}{
		{"abc", 5},
		{[]any{"a", "b"}, 2 + 2*(1+3)},
		{map[string]any{"k": "v"}, 2 + 1 + 4 + 3},
		{[]any{1.5, true, nil}, 2 + 3 + 8 + 5 + 4},
	} {
		if n := sizeOf(tc.v, 1<<20); n != tc.want {
			t.Errorf("sizeOf(%v) = %d, want %d", tc.v, n, tc.want)
		}
	}
}

// FuzzBoundedInterpolate: whatever a value's text and however often it
// repeats, Interpolate gives a result within the limits or a LimitError
// (or another error), quickly: what the text asks for does not decide the
// cost.
func FuzzBoundedInterpolate(f *testing.F) {
	for _, s := range append([]string{
		"${date_range('2000-01-01','2027-01-01')}", "${params.list}", "${params.env}",
		"${date_range('2000-01-01','2027-01-01') == date_range('2000-01-01','2027-01-01')}",
		"${date_format('2026-01-01', '%B%B%B%B%B%B%B%B%B%B%B%B%B%B')}",
	}, exprSeeds...) {
		f.Add(s, uint16(1))
		f.Add(s, uint16(40))
	}
	f.Fuzz(func(t *testing.T, s string, n uint16) {
		v := strings.Repeat(s, int(n%600)+1)
		in := map[string]any{"a": v, "b": []any{v, v}, "c": "${params.list}"}
		start := time.Now()
		got, err := Interpolate(in, whenScope())
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("Interpolate of %d bytes took %v", len(v), d)
		}
		if err != nil {
			return
		}
		if size := sizeOf(got, 2*MaxResolvedBytes); size > MaxResolvedBytes+len(v)*3+64 {
			t.Fatalf("result of %d bytes from %d bytes of text", size, len(v))
		}
		if a, ok := got.(map[string]any)["a"].(string); ok && len(a) > max(MaxValueBytes, len(v)) {
			t.Fatalf("a value of %d bytes", len(a))
		}
	})
}
