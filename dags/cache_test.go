package dags

import (
	"errors"
	"strings"
	"testing"
)

func cacheRegistry(t *testing.T) *Registry {
	t.Helper()
	reg, err := NewRegistry(
		NodeType{Name: "split", Fields: []Field{{Name: "days", Type: FieldInt}}, Cacheable: true},
		NodeType{Name: "command", Fields: []Field{{Name: "argv", Type: FieldStringList}}, Cacheable: true, CacheOptIn: true},
		NodeType{Name: "deploy", Fields: []Field{{Name: "model", Type: FieldString}}},
	)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// TestCachePlan: defaults turn caching on for the types that may be
// cached by default; a node's own setting wins (false too); a command
// is cached only by its own; a version and files reach the plan.
func TestCachePlan(t *testing.T) {
	spec := `name: p
defaults:
  cache: {version: 2}
nodes:
  - id: a
    type: split
  - id: b
    type: split
    cache: false
  - id: c
    type: split
    cache: {version: 3, files: ["lib/*.py"]}
  - id: d
    type: command
    with: {argv: [sh]}
  - id: e
    type: command
    with: {argv: [sh]}
    cache: true
  - id: g
    type: split
    cache: {files: [a]}
  - id: f
    type: deploy
`
	s, err := Load("p.yaml", []byte(spec), cacheRegistry(t))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Compile(s, cacheRegistry(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "version 2", "b": "off", "c": "version 3", "d": "off", "e": "version 2", "f": "off", "g": "version 2"}
	for _, n := range plan.Nodes {
		if got := n.Cache.String(); got != want[n.ID] {
			t.Errorf("node %s: cache %s, want %s", n.ID, got, want[n.ID])
		}
	}
	if c := plan.Nodes[2].Cache; len(c.Files) != 1 || c.Files[0] != "lib/*.py" {
		t.Errorf("node c: files %v", c.Files)
	}
}

// TestCacheErrors: cache: on a type with effects, a foreach node or an
// on_failure node is an error naming the node at its line; so is a
// malformed setting.
func TestCacheErrors(t *testing.T) {
	cases := []struct {
		name, spec, want string
		line             int
	}{
		{"effects", "name: p\nnodes:\n  - id: ship\n    type: deploy\n    cache: true\n",
			`node "ship": type deploy has effects on the world and is never served from a cache; remove cache:`, 5},
		{"effects mapping", "name: p\nnodes:\n  - id: ship\n    type: deploy\n    cache: {version: 1}\n",
			`node "ship": type deploy has effects`, 5},
		{"foreach", "name: p\nparams:\n  xs: {type: list, default: [1]}\nnodes:\n  - id: s\n    type: split\n    foreach: ${params.xs}\n    cache: true\n",
			`node "s": a foreach node is not cached`, 8},
		{"on_failure", "name: p\nnodes:\n  - id: s\n    type: split\non_failure:\n  - id: u\n    type: split\n    compensates: s\n    cache: true\n",
			`on_failure node "u": on_failure nodes undo effects`, 9},
		{"not a bool", "name: p\nnodes:\n  - id: s\n    type: split\n    cache: yes please\n", "cache", 5},
		{"unknown key", "name: p\nnodes:\n  - id: s\n    type: split\n    cache: {versoin: 1}\n", `unknown field "versoin"`, 5},
		{"negative", "name: p\nnodes:\n  - id: s\n    type: split\n    cache: {version: -1}\n", "must not be negative", 5},
		{"defaults", "name: p\ndefaults:\n  cache: {files: [1, [2]]}\nnodes:\n  - id: s\n    type: split\n", "defaults.cache.files", 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load("p.yaml", []byte(tc.spec), cacheRegistry(t))
			if err == nil {
				t.Fatal("loaded")
			}
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("%v: not an ErrorList", err)
			}
			for _, e := range list {
				if strings.Contains(e.Msg, tc.want) {
					if e.Line != tc.line || e.File != "p.yaml" {
						t.Errorf("%q at %s:%d, want line %d", e.Msg, e.File, e.Line, tc.line)
					}
					return
				}
			}
			t.Errorf("errors %v: none says %q", err, tc.want)
		})
	}
}

// TestCacheDefaultsSkipEffects: defaults: {cache: true} leaves a type
// with effects alone instead of failing the spec.
func TestCacheDefaultsSkipEffects(t *testing.T) {
	s, err := Load("p.yaml", []byte("name: p\ndefaults: {cache: true}\nnodes:\n  - id: ship\n    type: deploy\n"), cacheRegistry(t))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Compile(s, cacheRegistry(t), nil)
	if err != nil || plan.Nodes[0].Cache != nil {
		t.Fatalf("plan %+v, %v: want deploy uncached", plan, err)
	}
}
