package dags

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestCompileExample(t *testing.T) {
	reg := testRegistry(t)
	plan, err := Compile(mustParse(t, exampleSpec), reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	retry := RetryPolicy{MaxAttempts: 3, InitialInterval: time.Second, Backoff: 2, MaxInterval: time.Minute}
	retry5 := retry
	retry5.MaxAttempts = 5
	cmdFields := reg.types["command"].FieldTypes() // what the run converts references to
	want := &Plan{
		Pipeline:     "example",
		Source:       "test.yaml",
		Parallelism:  16,
		Params:       map[string]any{"date": "2026-01-01"},
		ParamsDigest: plan.ParamsDigest,
		Nodes: []PlanNode{
			{ID: "a", Type: "command", Kind: KindActivity, Target: "command",
				With:  map[string]any{"argv": []any{"sh", "-c", "echo hello"}},
				Retry: retry, Timeout: 10 * time.Minute, Heartbeat: 30 * time.Second, Fields: cmdFields},
			{ID: "b", Type: "command", Kind: KindActivity, Target: "command", Needs: []string{"a"},
				With:  map[string]any{"argv": []any{"echo", "${params.date}", "${nodes.a.outputs.stdout}"}},
				Retry: retry5, Timeout: 10 * time.Minute, Heartbeat: 30 * time.Second, Fields: cmdFields},
			{ID: "c", Type: "command", Kind: KindActivity, Target: "command", Needs: []string{"a"},
				When:  "${nodes.a.outputs.exit_code} == 0",
				With:  map[string]any{"argv": []any{"true"}},
				Retry: retry, Timeout: 10 * time.Minute, Heartbeat: 30 * time.Second, Fields: cmdFields},
		},
	}
	if !reflect.DeepEqual(plan, want) {
		g, _ := json.MarshalIndent(plan, "", "  ")
		w, _ := json.MarshalIndent(want, "", "  ")
		t.Errorf("plan:\n%s\nwant:\n%s", g, w)
	}
	if len(plan.ParamsDigest) != 16 {
		t.Errorf("digest %q is not 16 hex digits", plan.ParamsDigest)
	}
	// A plan is recorded in workflow history as JSON; it must survive.
	b, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	var back Plan
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back.Nodes[1].Retry, retry5) {
		t.Errorf("round trip: %v %+v", err, back.Nodes[1].Retry)
	}
}

func TestCompileDefaults(t *testing.T) {
	src := `name: d
parallelism: 4
defaults:
  retry: {max_attempts: 7, non_retryable: [Fatal]}
  heartbeat: 0s
  queue: cpu
nodes:
  - id: plain
    type: noop
  - id: trainer
    type: train
    with: {epochs: 3}
    retry: {backoff: 1.5, initial_interval: 2s, non_retryable: []}
    timeout: 1d
    heartbeat: 5m
  - id: own-queue
    type: train
    with: {epochs: 3}
    queue: special
`
	plan, err := Compile(mustParse(t, src), testRegistry(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Parallelism != 4 {
		t.Errorf("parallelism %d", plan.Parallelism)
	}
	byID := map[string]PlanNode{}
	for _, n := range plan.Nodes {
		byID[n.ID] = n
	}
	for _, tc := range []struct {
		id        string
		retry     RetryPolicy
		timeout   time.Duration
		heartbeat time.Duration
		queue     string
		kind      Kind
	}{
		{"plain", RetryPolicy{7, time.Second, 2, time.Minute, []string{"Fatal"}}, time.Hour, 0, "cpu", KindActivity},
		{"trainer", RetryPolicy{7, 2 * time.Second, 1.5, time.Minute, []string{}}, 24 * time.Hour, 5 * time.Minute, "cpu", KindWorkflow},
		{"own-queue", RetryPolicy{7, time.Second, 2, time.Minute, []string{"Fatal"}}, time.Hour, 0, "special", KindWorkflow},
	} {
		n := byID[tc.id]
		if !reflect.DeepEqual(n.Retry, tc.retry) || n.Timeout != tc.timeout || n.Heartbeat != tc.heartbeat || n.Queue != tc.queue || n.Kind != tc.kind {
			t.Errorf("%s: got retry %+v timeout %v heartbeat %v queue %q kind %s\nwant retry %+v timeout %v heartbeat %v queue %q kind %s",
				tc.id, n.Retry, n.Timeout, n.Heartbeat, n.Queue, n.Kind, tc.retry, tc.timeout, tc.heartbeat, tc.queue, tc.kind)
		}
	}

	// Without defaults.queue, the type's queue applies.
	plan, err = Compile(mustParse(t, "name: q\nnodes:\n  - id: t\n    type: train\n    with: {epochs: 1}\n"), testRegistry(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := plan.Nodes[0]; n.Queue != "gpu" || n.Heartbeat != DefaultHeartbeat || n.Timeout != DefaultTimeout || !reflect.DeepEqual(n.Retry, DefaultRetry()) {
		t.Errorf("built-in defaults: %+v", n)
	}
}

// The plan must not share memory with the spec: the interpreter may
// modify it, and a spec may be compiled again.
func TestCompileCopies(t *testing.T) {
	src := `name: c
defaults:
  retry: {non_retryable: [A]}
nodes:
  - id: a
    type: command
    with: {argv: [x], env: {K: v}}
  - id: b
    type: noop
    needs: [a]
`
	s := mustParse(t, src)
	reg := testRegistry(t)
	p1, err := Compile(s, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	p1.Nodes[0].With["argv"].([]any)[0] = "changed"
	p1.Nodes[0].With["env"].(map[string]any)["K"] = "changed"
	p1.Nodes[0].Retry.NonRetryable[0] = "changed"
	p1.Nodes[1].Needs[0] = "changed"
	p2, err := Compile(s, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p2.Nodes[0].With["argv"].([]any)[0] != "x" || p2.Nodes[0].With["env"].(map[string]any)["K"] != "v" ||
		p2.Nodes[0].Retry.NonRetryable[0] != "A" || p2.Nodes[1].Needs[0] != "a" || p2.Nodes[1].Retry.NonRetryable[0] != "A" {
		t.Errorf("second plan sees changes to the first: %+v", p2.Nodes)
	}
}

const paramsSpec = `name: p
params:
  s: {}
  i: {type: int}
  f: {type: number, default: 0.5}
  b: {type: bool, default: false}
  l: {type: list, default: []}
  m: {type: map, default: {}}
  opt: {type: int, required: false}
nodes:
  - id: a
    type: noop
`

func TestCompileParams(t *testing.T) {
	s := mustParse(t, paramsSpec)
	reg := testRegistry(t)
	for _, tc := range []struct {
		name  string
		given map[string]any
		want  map[string]any
	}{
		{"strings from a command line",
			map[string]any{"s": "x", "i": "5", "f": "2.5", "b": "TRUE", "l": `[1,"a"]`, "m": `{"k":[true]}`},
			map[string]any{"s": "x", "i": 5, "f": 2.5, "b": true, "l": []any{1.0, "a"}, "m": map[string]any{"k": []any{true}}, "opt": nil}},
		{"typed from JSON",
			map[string]any{"s": "x", "i": 5.0, "f": 3.0, "b": false, "l": []any{"x"}, "m": map[string]any{"a": 1.0}, "opt": 2.0},
			map[string]any{"s": "x", "i": 5, "f": 3.0, "b": false, "l": []any{"x"}, "m": map[string]any{"a": 1.0}, "opt": 2}},
		{"defaults",
			map[string]any{"s": "", "i": -3},
			map[string]any{"s": "", "i": -3, "f": 0.5, "b": false, "l": []any{}, "m": map[string]any{}, "opt": nil}},
		{"number to string, int from text float, go types",
			map[string]any{"s": 1.5, "i": "7.0", "l": []string{"a", "b"}, "m": map[string]int{"x": 1}},
			map[string]any{"s": "1.5", "i": 7, "f": 0.5, "b": false, "l": []any{"a", "b"}, "m": map[string]any{"x": 1.0}, "opt": nil}},
		{"explicit null for an optional param",
			map[string]any{"s": "x", "i": 1, "opt": nil},
			map[string]any{"s": "x", "i": 1, "f": 0.5, "b": false, "l": []any{}, "m": map[string]any{}, "opt": nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := Compile(s, reg, tc.given)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(plan.Params, tc.want) {
				t.Errorf("params:\n got %#v\nwant %#v", plan.Params, tc.want)
			}
		})
	}
}

func TestCompileParamErrors(t *testing.T) {
	s := mustParse(t, paramsSpec)
	reg := testRegistry(t)
	for _, tc := range []struct {
		name  string
		given map[string]any
		want  string
		line  int
	}{
		{"unknown", map[string]any{"s": "x", "i": 1, "ii": 2}, `unknown param "ii" (did you mean "i"?); declared params: s, i, f, b, l, m, opt`, 2},
		{"missing required", map[string]any{"s": "x"}, `missing required param "i" (int)`, 4},
		{"int from fraction", map[string]any{"s": "x", "i": 5.5}, `param "i": want an integer, got number 5.5`, 4},
		{"int from text", map[string]any{"s": "x", "i": "five"}, `param "i": want an integer, got "five"`, 4},
		{"int from bool", map[string]any{"s": "x", "i": true}, `param "i": want an integer, got bool`, 4},
		{"number from text", map[string]any{"s": "x", "i": 1, "f": "NaN"}, `param "f": want a number, got "NaN"`, 5},
		{"bool from text", map[string]any{"s": "x", "i": 1, "b": "yes"}, `param "b": want true or false, got "yes"`, 6},
		{"bool from number", map[string]any{"s": "x", "i": 1, "b": 1.0}, `param "b": want true or false, got number`, 6},
		{"list from bad JSON", map[string]any{"s": "x", "i": 1, "l": "a,b"}, `param "l": want a list as JSON text, got "a,b"`, 7},
		{"list from map", map[string]any{"s": "x", "i": 1, "l": map[string]any{}}, `param "l": want a list, got map`, 7},
		{"map from list text", map[string]any{"s": "x", "i": 1, "m": "[1]"}, `param "m": want a map, got list`, 8},
		{"string from list", map[string]any{"s": []any{"x"}, "i": 1}, `param "s": want a string, got list`, 3},
		{"null for required", map[string]any{"s": nil, "i": 1}, `param "s" (string) must not be null`, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile(s, reg, tc.given)
			checkError(t, err, tc.want, tc.line)
		})
	}
}

func TestCompileValidates(t *testing.T) {
	s := mustParse(t, "name: x\nnodes:\n  - id: a\n    type: nope\n")
	_, err := Compile(s, testRegistry(t), nil)
	checkError(t, err, `unknown type "nope"`, 4)
	if _, err := Compile(s, nil, nil); err == nil {
		t.Error("Compile with a nil registry succeeded")
	}
}

func TestParamsDigest(t *testing.T) {
	// Same values built in different orders, and with different Go number
	// types, give the same digest.
	a := map[string]any{}
	for _, k := range []string{"a", "b", "c", "d"} {
		a[k] = map[string]any{"x": 1, "y": []any{1.5, "s"}}
	}
	b := map[string]any{}
	for _, k := range []string{"d", "c", "b", "a"} {
		b[k] = map[string]any{"y": []any{1.5, "s"}, "x": 1.0}
	}
	da, err := ParamsDigest(a)
	if err != nil {
		t.Fatal(err)
	}
	db, _ := ParamsDigest(b)
	if da != db {
		t.Errorf("digests differ: %s %s", da, db)
	}
	if len(da) != 16 || strings.Trim(da, "0123456789abcdef") != "" {
		t.Errorf("digest %q is not 16 hex digits", da)
	}
	// Pinned: a changed digest would make every past run look different.
	if d, _ := ParamsDigest(map[string]any{"date": "2026-01-01"}); d != "730a19f514f12ebb" {
		t.Errorf("digest of {date: 2026-01-01} = %s", d)
	}
	dn, _ := ParamsDigest(nil)
	de, _ := ParamsDigest(map[string]any{})
	if dn != de {
		t.Errorf("nil and empty params differ: %s %s", dn, de)
	}
	if dc, _ := ParamsDigest(map[string]any{"date": "2026-01-02"}); dc == da {
		t.Error("different params, same digest")
	}

	// Through Compile: the CLI's strings and the API's JSON agree.
	s := mustParse(t, paramsSpec)
	reg := testRegistry(t)
	p1, err := Compile(s, reg, map[string]any{"s": "x", "i": "5", "b": "true", "m": `{"b":1,"a":2}`})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := Compile(s, reg, map[string]any{"m": map[string]any{"a": 2.0, "b": 1.0}, "b": true, "i": 5.0, "s": "x"})
	if err != nil {
		t.Fatal(err)
	}
	if p1.ParamsDigest != p2.ParamsDigest {
		t.Errorf("digests differ: %s %s", p1.ParamsDigest, p2.ParamsDigest)
	}
}

func TestTopoOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes [][]string // id, then needs
		want  []string
	}{
		{"file order when independent", [][]string{{"c"}, {"a"}, {"b"}}, []string{"c", "a", "b"}},
		{"needs first", [][]string{{"b", "a"}, {"a"}}, []string{"a", "b"}},
		{"ready in file order", [][]string{{"d", "a"}, {"a"}, {"c", "a"}, {"b"}}, []string{"a", "d", "c", "b"}},
		{"lowest ready first", [][]string{{"x"}, {"y", "z"}, {"z"}, {"w", "x"}}, []string{"x", "z", "y", "w"}},
		{"diamond", [][]string{{"d", "b", "c"}, {"c", "a"}, {"b", "a"}, {"a"}}, []string{"a", "c", "b", "d"}},
		{"duplicate needs", [][]string{{"b", "a", "a"}, {"a"}}, []string{"a", "b"}},
		{"cycle last", [][]string{{"a", "b"}, {"b", "a"}, {"c"}}, []string{"c", "a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var nodes []*Node
			for _, n := range tc.nodes {
				nodes = append(nodes, &Node{ID: n[0], Needs: n[1:]})
			}
			if got := ids(topoOrder(nodes)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCompileOnFailure(t *testing.T) {
	src := `name: f
nodes:
  - id: a
    type: noop
  - id: b
    type: noop
    needs: [a]
on_failure:
  - id: notify
    type: noop
    compensates: a
    needs: [undo-b]
  - id: undo-b
    type: command
    compensates: b
    with: {argv: [rollback, "${nodes.b.outputs.version}"]}
    retry: {max_attempts: 10}
`
	plan, err := Compile(mustParse(t, src), testRegistry(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(plan.OnFailure); got != 2 {
		t.Fatalf("%d on_failure nodes", got)
	}
	u, n := plan.OnFailure[0], plan.OnFailure[1]
	if u.ID != "undo-b" || u.Compensates != "b" || u.Retry.MaxAttempts != 10 || u.Target != "command" {
		t.Errorf("undo-b: %+v", u)
	}
	if n.ID != "notify" || n.Compensates != "a" || !reflect.DeepEqual(n.Needs, []string{"undo-b"}) {
		t.Errorf("notify: %+v", n)
	}
	var list ErrorList
	_, err = Compile(mustParse(t, src+"  - id: bad\n    type: noop\n    compensates: zz\n"), testRegistry(t), nil)
	if !errors.As(err, &list) {
		t.Errorf("want ErrorList, got %v", err)
	}
}
