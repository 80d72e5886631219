package dags

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseExample(t *testing.T) {
	s := mustParse(t, exampleSpec)
	if s.Name != "example" || s.File != "test.yaml" || s.Parallelism != DefaultParallelism {
		t.Errorf("name %q file %q parallelism %d", s.Name, s.File, s.Parallelism)
	}
	if len(s.Params) != 1 || s.Params[0].Name != "date" || s.Params[0].Default != "2026-01-01" || s.Params[0].Required {
		t.Errorf("params: %+v", s.Params[0])
	}
	if *s.Defaults.Timeout != 10*time.Minute || *s.Defaults.Retry.MaxAttempts != 3 || *s.Defaults.Retry.Backoff != 2 {
		t.Errorf("defaults: %+v", s.Defaults)
	}
	if got := ids(s.Nodes); !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Errorf("nodes %v", got)
	}
	b := s.Nodes[1]
	if !reflect.DeepEqual(b.Needs, []string{"a"}) || b.NeedsPos[0] != (Pos{13, 13}) {
		t.Errorf("b needs %v at %v", b.Needs, b.NeedsPos)
	}
	wantWith := map[string]any{"argv": []any{"echo", "${params.date}", "${nodes.a.outputs.stdout}"}}
	if !reflect.DeepEqual(b.With, wantWith) {
		t.Errorf("b with = %#v", b.With)
	}
	if b.WithKeyPos["argv"].Line != 14 || b.Pos.Line != 11 || b.TypePos.Line != 12 {
		t.Errorf("b positions: with argv %v, node %v, type %v", b.WithKeyPos["argv"], b.Pos, b.TypePos)
	}
	if *b.Retry.MaxAttempts != 5 || b.Retry.Backoff != nil {
		t.Errorf("b retry %+v", b.Retry)
	}
	if c := s.Nodes[2]; c.When != "${nodes.a.outputs.exit_code} == 0" || c.WhenPos.Line != 19 {
		t.Errorf("c when %q at %v", c.When, c.WhenPos)
	}
}

func TestParseTrailingDocumentMarker(t *testing.T) {
	mustParse(t, "---\nname: x\nnodes:\n  - id: a\n    type: noop\n---\n")
	mustParse(t, "name: x\nnodes:\n  - id: a\n    type: noop\n...\n")
}

func TestParseEmptyBlocks(t *testing.T) {
	s := mustParse(t, `name: x
description:
params:
defaults:
  retry:
nodes:
  - id: a
    type: noop
    needs:
    with:
    retry:
on_failure:
`)
	if n := s.Nodes[0]; n.Needs != nil || n.With != nil || !n.Retry.IsZero() || len(s.Params) != 0 || len(s.OnFailure) != 0 {
		t.Errorf("empty blocks: %+v", n)
	}
	if err := s.Validate(testRegistry(t)); err != nil {
		t.Error(err)
	}
}

func TestParseJSON(t *testing.T) {
	src := `{
  "name": "j",
  "params": {"n": {"type": "int", "default": 3}},
  "nodes": [
    {"id": "a", "type": "command", "with": {"argv": ["echo", "${params.n}"], "ok_exit_codes": [0, 1]}},
    {"id": "b", "type": "noop", "needs": ["a"], "timeout": "1d12h"}
  ]
}`
	s := mustParse(t, src)
	if s.Params[0].Default != 3 {
		t.Errorf("default %#v", s.Params[0].Default)
	}
	if *s.Nodes[1].Timeout != 36*time.Hour {
		t.Errorf("timeout %v", *s.Nodes[1].Timeout)
	}
	if !reflect.DeepEqual(s.Nodes[0].With["ok_exit_codes"], []any{0, 1}) {
		t.Errorf("with %#v", s.Nodes[0].With)
	}
	if err := s.Validate(testRegistry(t)); err != nil {
		t.Error(err)
	}
}

func TestParseValues(t *testing.T) {
	src := `name: v
params:
  s: {default: 1.10}
  d: {default: 2026-01-01}
  i: {type: int, default: 5}
  f: {type: number, default: 5}
  b: {type: bool, default: true}
  l: {type: list, default: [1, "x", {k: v}]}
  m: {type: map, default: {a: 1}}
  opt: {type: int, required: false}
  req: {type: string}
  bare:
nodes:
  - id: a
    type: noop
    with:
      str: hello
      int: 42
      float: 0.25
      bool: false
      null: ~
      list: [1, two]
      map: {k: v}
      date: 2026-01-01
      quoted: "5"
`
	s := mustParse(t, src)
	want := map[string]struct {
		v        any
		required bool
	}{
		"s":    {"1.10", false},
		"d":    {"2026-01-01", false},
		"i":    {5, false},
		"f":    {5.0, false},
		"b":    {true, false},
		"l":    {[]any{1.0, "x", map[string]any{"k": "v"}}, false},
		"m":    {map[string]any{"a": 1.0}, false},
		"opt":  {nil, false},
		"req":  {nil, true},
		"bare": {nil, true},
	}
	for _, p := range s.Params {
		w := want[p.Name]
		if !reflect.DeepEqual(p.Default, w.v) || p.Required != w.required {
			t.Errorf("param %s: default %#v required %v; want %#v %v", p.Name, p.Default, p.Required, w.v, w.required)
		}
	}
	wantWith := map[string]any{
		"str": "hello", "int": 42, "float": 0.25, "bool": false, "null": nil,
		"list": []any{1, "two"}, "map": map[string]any{"k": "v"}, "date": "2026-01-01", "quoted": "5",
	}
	if !reflect.DeepEqual(s.Nodes[0].With, wantWith) {
		t.Errorf("with:\n got %#v\nwant %#v", s.Nodes[0].With, wantWith)
	}
}

func TestParseAnchorsAndMerge(t *testing.T) {
	src := `name: anchors
defaults:
  retry: &r {max_attempts: 4, backoff: 1.5}
nodes:
  - &base
    id: a
    type: command
    with: {argv: &argv [echo, hi], env: {A: "1"}}
  - <<: *base
    id: b
    needs: [a]
    with: {argv: *argv}
    retry: *r
`
	s := mustParse(t, src)
	b := s.Nodes[1]
	if b.ID != "b" || b.Type != "command" || !reflect.DeepEqual(b.With["argv"], []any{"echo", "hi"}) || *b.Retry.MaxAttempts != 4 {
		t.Errorf("merged node: %+v", b)
	}
	if _, ok := b.With["env"]; ok {
		t.Errorf("explicit with should replace the merged one, got %v", b.With)
	}
}

func TestParseErrors(t *testing.T) {
	const nodesOK = "nodes:\n  - id: a\n    type: noop\n"
	for _, tc := range []errorCase{
		{"syntax", "name: x\nnodes: [\n  - a: b\n", "syntax error", 0},
		{"tab", "name: x\n\tnodes: []\n", "syntax error", 2},
		{"empty", "", "empty spec", 1},
		{"null doc", "---\n", "empty spec", 0},
		{"two docs", "name: x\n" + nodesOK + "---\nname: y\n", "one YAML document", 6},
		{"bad encoding", "name: x\xff\n" + nodesOK, "syntax error", 0},
		{"not mapping", "- a\n- b\n", "the spec must be a mapping, got list", 1},
		{"missing name", nodesOK, `missing required field "name"`, 1},
		{"bad name", "name: Foo\n" + nodesOK, `invalid name "Foo"`, 1},
		{"name list", "name: [a]\n" + nodesOK, "name must be a string, got list", 1},
		{"unknown top", "name: x\nnodse: []\n" + nodesOK, `unknown field "nodse" at top level (did you mean "nodes"?)`, 2},
		{"unknown top far", "name: x\nzzz: 1\n" + nodesOK, `unknown field "zzz" at top level`, 2},
		{"repeated key", "name: x\nname: y\n" + nodesOK, `key "name" repeated (first at line 1)`, 2},
		{"missing nodes", "name: x\n", `missing required field "nodes"`, 1},
		{"empty nodes", "name: x\nnodes: []\n", "nodes must not be empty", 2},
		{"nodes mapping", "name: x\nnodes: {a: 1}\n", "nodes must be a list of nodes, got mapping", 2},
		{"node scalar", "name: x\nnodes:\n  - a\n", "nodes entry #1 must be a mapping, got string", 3},
		{"parallelism", "name: x\nparallelism: 0\n" + nodesOK, "parallelism must be at least 1", 2},
		{"parallelism type", "name: x\nparallelism: many\n" + nodesOK, `parallelism must be an integer, got string "many"`, 2},

		{"params list", "name: x\nparams: [a]\n" + nodesOK, "params must be a mapping, got list", 2},
		{"param scalar", "name: x\nparams:\n  p: hello\n" + nodesOK, `param "p" must be a mapping, got string`, 3},
		{"param unknown field", "name: x\nparams:\n  p: {tpye: int}\n" + nodesOK, `unknown field "tpye" in param "p" (did you mean "type"?)`, 3},
		{"param bad type", "name: x\nparams:\n  p: {type: integer}\n" + nodesOK, `param "p": unknown type "integer"`, 3},
		{"param bad name", "name: x\nparams:\n  1p: {}\n" + nodesOK, `invalid param name "1p"`, 3},
		{"param default type", "name: x\nparams:\n  p:\n    type: int\n    default: 5.5\n" + nodesOK, `param "p" default: want an integer, got number 5.5`, 5},
		{"param default bool", "name: x\nparams:\n  p: {type: bool, default: maybe}\n" + nodesOK, `want true or false, got "maybe"`, 3},
		{"param default list", "name: x\nparams:\n  p: {type: list, default: {a: 1}}\n" + nodesOK, "want a list, got map", 3},
		{"param required and default", "name: x\nparams:\n  p: {required: true, default: a}\n" + nodesOK, `param "p" is required and has a default`, 3},
		{"param required type", "name: x\nparams:\n  p: {required: yes please}\n" + nodesOK, "required must be true or false", 3},
		{"param nan", "name: x\nparams:\n  p: {type: number, default: .nan}\n" + nodesOK, "not a finite number", 3},

		{"defaults unknown", "name: x\ndefaults:\n  timout: 1m\n" + nodesOK, `unknown field "timout" in defaults (did you mean "timeout"?)`, 3},
		{"defaults scalar", "name: x\ndefaults: 5\n" + nodesOK, "defaults must be a mapping, got number", 2},
		{"defaults timeout", "name: x\ndefaults:\n  timeout: 10\n" + nodesOK, "defaults.timeout: invalid duration \"10\": missing unit", 3},
		{"defaults timeout zero", "name: x\ndefaults:\n  timeout: 0s\n" + nodesOK, "defaults.timeout must be positive", 3},
		{"defaults heartbeat", "name: x\ndefaults:\n  heartbeat: -1s\n" + nodesOK, "negative", 3},
		{"defaults queue", "name: x\ndefaults:\n  queue: [a]\n" + nodesOK, "defaults.queue must be a string", 3},
		{"retry unknown", "name: x\ndefaults:\n  retry:\n    max_atempts: 2\n" + nodesOK, `unknown field "max_atempts" in defaults.retry (did you mean "max_attempts"?)`, 4},
		{"retry attempts", "name: x\ndefaults:\n  retry: {max_attempts: 0}\n" + nodesOK, "max_attempts must be at least 1", 3},
		{"retry attempts float", "name: x\ndefaults:\n  retry: {max_attempts: 2.5}\n" + nodesOK, "max_attempts must be an integer", 3},
		{"retry interval", "name: x\ndefaults:\n  retry: {initial_interval: 0s}\n" + nodesOK, "initial_interval must be positive", 3},
		{"retry interval unit", "name: x\ndefaults:\n  retry: {max_interval: 5y}\n" + nodesOK, `unknown unit "y"`, 3},
		{"retry backoff", "name: x\ndefaults:\n  retry: {backoff: 0.5}\n" + nodesOK, "backoff must be at least 1", 3},
		{"retry backoff type", "name: x\ndefaults:\n  retry: {backoff: fast}\n" + nodesOK, "backoff must be a number", 3},
		{"retry non_retryable", "name: x\ndefaults:\n  retry: {non_retryable: Fatal}\n" + nodesOK, "non_retryable must be a list of strings, got string", 3},
		{"retry non_retryable item", "name: x\ndefaults:\n  retry:\n    non_retryable:\n      - {a: b}\n" + nodesOK, "got a mapping item", 5},

		{"node missing id", "name: x\nnodes:\n  - type: noop\n", `nodes entry #1: missing required field "id"`, 3},
		{"node bad id", "name: x\nnodes:\n  - id: 1a\n    type: noop\n", `invalid node id "1a"`, 3},
		{"node bad id chars", "name: x\nnodes:\n  - id: a.b\n    type: noop\n", `invalid node id "a.b"`, 3},
		{"node missing type", "name: x\nnodes:\n  - id: a\n", `node "a": missing required field "type"`, 3},
		{"node unknown field", "name: x\nnodes:\n  - id: a\n    type: noop\n  - id: b\n    type: noop\n    neds: [a]\n", `unknown field "neds" in node "b" (did you mean "needs"?)`, 7},
		{"node unknown before id", "name: x\nnodes:\n  - typo: 1\n    id: b\n    type: noop\n", `unknown field "typo" in node "b" (did you mean "type"?)`, 3},
		{"node compensates", "name: x\nnodes:\n  - id: a\n    type: noop\n    compensates: a\n", "compensates is for on_failure nodes", 5},
		{"node repeated field", "name: x\nnodes:\n  - id: a\n    type: noop\n    type: command\n", `node "a": key "type" repeated (first at line 4)`, 5},
		{"needs string", "name: x\nnodes:\n  - id: a\n    type: noop\n    needs: b\n", `node "a" needs must be a list of strings, got string`, 5},
		{"needs mapping", "name: x\nnodes:\n  - id: a\n    type: noop\n    needs: {b: 1}\n", "needs must be a list of strings, got mapping", 5},
		{"needs item", "name: x\nnodes:\n  - id: a\n    type: noop\n    needs:\n      - [b]\n", "got a list item", 6},
		{"when list", "name: x\nnodes:\n  - id: a\n    type: noop\n    when: [x]\n", `node "a" when must be a string, got list`, 5},
		{"with list", "name: x\nnodes:\n  - id: a\n    type: noop\n    with: [x]\n", `node "a" with must be a mapping, got list`, 5},
		{"with bad tag", "name: x\nnodes:\n  - id: a\n    type: noop\n    with: {x: !custom 5}\n", "unsupported YAML tag !custom", 5},
		{"with inf", "name: x\nnodes:\n  - id: a\n    type: noop\n    with:\n      x: [1, .inf]\n", `node "a" with field "x": .inf is not a finite number`, 6},
		{"with complex key", "name: x\nnodes:\n  - id: a\n    type: noop\n    with:\n      ? [a]\n      : 1\n", "keys must be strings, got list", 6},
		{"when tag", "name: x\nnodes:\n  - id: a\n    type: noop\n    when: !done\n", `node "a" when: unsupported YAML tag !done (a value starting with ! must be quoted)`, 5},
		{"needs tag", "name: x\nnodes:\n  - id: a\n    type: noop\n    needs:\n      - !b\n", "unsupported YAML tag !b", 6},
		{"node timeout", "name: x\nnodes:\n  - id: a\n    type: noop\n    timeout: soon\n", `node "a" timeout: invalid duration "soon"`, 5},
		{"node heartbeat", "name: x\nnodes:\n  - id: a\n    type: noop\n    heartbeat: 1x\n", `unknown unit "x"`, 5},
		{"node retry", "name: x\nnodes:\n  - id: a\n    type: noop\n    retry:\n      backof: 2\n", `unknown field "backof" in node "a" retry (did you mean "backoff"?)`, 6},
		{"node retry scalar", "name: x\nnodes:\n  - id: a\n    type: noop\n    retry: 3\n", `node "a" retry must be a mapping, got number`, 5},
		{"node queue", "name: x\nnodes:\n  - id: a\n    type: noop\n    queue: ~\n", `node "a" queue must be a string, got null`, 5},

		{"on_failure mapping", "name: x\n" + nodesOK + "on_failure: {a: 1}\n", "on_failure must be a list of nodes", 5},
		{"on_failure missing compensates", "name: x\n" + nodesOK + "on_failure:\n  - id: u\n    type: noop\n", `on_failure node "u": missing required field "compensates"`, 6},
		{"on_failure unknown field", "name: x\n" + nodesOK + "on_failure:\n  - id: u\n    type: noop\n    compensate: a\n", `unknown field "compensate" in on_failure node "u" (did you mean "compensates"?)`, 8},

		{"alias cycle", "name: x\nnodes:\n  - id: a\n    type: noop\n    with:\n      x: &l [1, *l]\n", "nested too deeply", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("test.yaml", []byte(tc.src))
			checkError(t, err, tc.want, tc.line)
		})
	}
}

func TestParseCollectsErrors(t *testing.T) {
	src := `name: Bad
nodes:
  - id: a
    type: noop
    neds: [x]
  - id: b
    tpye: noop
`
	_, err := Parse("f.yaml", []byte(src))
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("want ErrorList, got %v", err)
	}
	want := []string{
		`f.yaml:1:7: invalid name "Bad"`,
		`f.yaml:5:5: unknown field "neds" in node "a" (did you mean "needs"?)`,
		`f.yaml:6:5: node "b": missing required field "type"`,
		`f.yaml:7:5: unknown field "tpye" in node "b" (did you mean "type"?)`,
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(lines), len(want), err)
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("error %d:\n got %s\nwant %s...", i, lines[i], want[i])
		}
	}
}

func TestLoad(t *testing.T) {
	reg := testRegistry(t)
	if _, err := Load("test.yaml", []byte(exampleSpec), reg); err != nil {
		t.Fatal(err)
	}
	_, err := Load("test.yaml", []byte("name: x\nnodes:\n  - id: a\n    type: nope\n"), reg)
	checkError(t, err, `unknown type "nope"`, 4)
	_, err = Load("test.yaml", []byte("name: x\n"), reg)
	checkError(t, err, `missing required field "nodes"`, 1)
}

func TestErrorFormat(t *testing.T) {
	for _, tc := range []struct {
		e    Error
		want string
	}{
		{Error{"f.yaml", 3, 5, "bad"}, "f.yaml:3:5: bad"},
		{Error{"f.yaml", 3, 0, "bad"}, "f.yaml:3: bad"},
		{Error{"", 3, 5, "bad"}, "3:5: bad"},
		{Error{"f.yaml", 0, 0, "bad"}, "f.yaml: bad"},
		{Error{"", 0, 0, "bad"}, "bad"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("%+v: got %q, want %q", tc.e, got, tc.want)
		}
	}
	list := ErrorList{{Line: 9, Msg: "c"}, {Line: 2, Col: 4, Msg: "b"}, {Line: 2, Col: 1, Msg: "a"}}
	if got, want := list.Error(), "2:1: a\n2:4: b\n9: c"; got != want {
		t.Errorf("list: got %q, want %q", got, want)
	}
	if (ErrorList)(nil).Err() != nil {
		t.Error("empty list Err is not nil")
	}
}

func TestSuggest(t *testing.T) {
	known := []string{"needs", "when", "with", "id", "type"}
	for word, want := range map[string]string{
		"neds":   "needs",
		"nedds":  "needs",
		"wiht":   "with",
		"x":      "", // too short to guess
		"zzzzzz": "",
		"ib":     "id",
	} {
		if got := suggest(word, known); got != want {
			t.Errorf("suggest(%q) = %q, want %q", word, got, want)
		}
	}
}
