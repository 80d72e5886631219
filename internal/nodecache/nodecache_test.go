package nodecache

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func base() Components {
	raw := map[string]any{
		"data":   "${nodes.split.outputs.uri}",
		"epochs": "${params.epochs}",
		"seed":   "${params.seed}",
		"dims":   []any{"a", "b"},
	}
	return Components{
		Type: "train", TypeVersion: 1, CacheVersion: 0,
		With:   Flatten(map[string]any{"data": "s3://b/splits/1", "epochs": 2.0, "seed": 1, "dims": []any{"a", "b"}}),
		Inputs: map[string]string{InputName(KindObject, "s3://b/splits/1"): "sha256:aa", InputName(KindTable, "features.user_daily"): "101"},
		Labels: Labels(raw),
	}
}

// TestKeyChangesExactlyWithInputs: an unchanged set of components gives
// the same key (labels and number spelling aside); each kind of change
// gives another key, with a reason that names it.
func TestKeyChangesExactlyWithInputs(t *testing.T) {
	b := base()
	same := base()
	same.With["epochs"] = canonical(2) // int vs float64 2.0: the same value
	same.Labels = nil                  // labels are not part of the key
	if b.Key() != same.Key() {
		t.Fatalf("unchanged components: keys %s and %s differ", b.Key(), same.Key())
	}
	if r := Diff(b, same); len(r) != 0 {
		t.Errorf("unchanged components: reasons %q", r)
	}
	cases := []struct {
		name   string
		change func(c *Components)
		reason string
	}{
		{"param", func(c *Components) { c.With["epochs"] = "3" }, "param epochs 2 -> 3"},
		{"with field", func(c *Components) { c.With["data"] = `"s3://b/splits/2"` }, `with.data s3://b/splits/1 -> s3://b/splits/2`},
		{"list item", func(c *Components) { c.With["dims[1]"] = `"c d"` }, `with.dims[1] b -> "c d"`},
		{"param as text", func(c *Components) { c.With["seed"] = `"2"` }, "param seed 1 -> 2"},
		{"with added", func(c *Components) { c.With["lr"] = "0.1" }, "with.lr added (0.1)"},
		{"snapshot", func(c *Components) { c.Inputs[InputName(KindTable, "features.user_daily")] = "202" }, "features.user_daily snapshot 101 -> 202"},
		{"object", func(c *Components) { c.Inputs[InputName(KindObject, "s3://b/splits/1")] = "sha256:bb" }, "s3://b/splits/1 changed"},
		{"script", func(c *Components) { c.Inputs[InputName(KindFile, "examples/torch/train.py")] = "sha256:cc" }, "examples/torch/train.py added"},
		{"cache version", func(c *Components) { c.CacheVersion = 2 }, "cache version 0 -> 2"},
		{"type version", func(c *Components) { c.TypeVersion = 2 }, "train version 1 -> 2"},
		{"env", func(c *Components) { c.Inputs[InputName(KindEnv, "LR")] = "x" }, "now reads env LR"},
	}
	keys := map[string]string{b.Key(): "base"}
	for _, tc := range cases {
		c := base()
		tc.change(&c)
		k := c.Key()
		if other, dup := keys[k]; dup {
			t.Errorf("%s: key equals %s's", tc.name, other)
		}
		keys[k] = tc.name
		got := Diff(b, c)
		if len(got) != 1 || got[0] != tc.reason {
			t.Errorf("%s: reasons %q, want [%q]", tc.name, got, tc.reason)
		}
	}
}

// TestFlattenUnambiguous: keys holding path characters cannot collide
// with nested paths.
// TestDiffNamedInput: a `with` value that names what the node reads (a
// split's URI) explains the change of that input once.
func TestDiffNamedInput(t *testing.T) {
	a := Components{With: Flatten(map[string]any{"data": "s3://b/s/1"}), Inputs: map[string]string{InputName(KindObject, "s3://b/s/1"): "crc32c:a"}}
	b := Components{With: Flatten(map[string]any{"data": "s3://b/s/2"}), Inputs: map[string]string{InputName(KindObject, "s3://b/s/2"): "crc32c:b"}}
	if got := Diff(a, b); len(got) != 1 || got[0] != "with.data s3://b/s/1 -> s3://b/s/2" {
		t.Errorf("reasons %q", got)
	}
}

func TestFlattenUnambiguous(t *testing.T) {
	a := Components{With: Flatten(map[string]any{"a.b": 1})}
	b := Components{With: Flatten(map[string]any{"a": map[string]any{"b": 1}})}
	if a.Key() == b.Key() {
		t.Error(`{"a.b": 1} and {"a": {"b": 1}} share a key`)
	}
	e := Components{With: Flatten(map[string]any{"a": map[string]any{}})}
	n := Components{With: Flatten(map[string]any{})}
	if e.Key() == n.Key() {
		t.Error("an empty map and no field share a key")
	}
	if got := Flatten(map[string]any{"x": int64(1) << 60})["x"]; got != "1152921504606846976" {
		t.Errorf("int64 flattened to %s", got)
	}
}

// TestShortPair: two long values are shown from near where they differ.
func TestShortPair(t *testing.T) {
	a := `"s3://bucket/checkpoints/pipeline/run-1/split/aaaa/manifest.json"`
	b := `"s3://bucket/checkpoints/pipeline/run-2/split/bbbb/manifest.json"`
	sa, sb := shortPair(a, b)
	if sa != "…ine/run-1/split/aaaa/manifest.json" || sb != "…ine/run-2/split/bbbb/manifest.json" {
		t.Errorf("shortPair = %q, %q", sa, sb)
	}
}

func TestReasonAndAgo(t *testing.T) {
	if got := Reason([]string{"a", "b", "c", "d", "e"}); got != "a; b; c; and 2 more" {
		t.Errorf("Reason = %q", got)
	}
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for d, want := range map[time.Duration]string{
		10 * time.Second: "just now", 5 * time.Minute: "5 minutes ago", time.Hour: "1 hour ago", 72 * time.Hour: "3 days ago",
	} {
		if got := Ago(now.Add(-d), now); got != want {
			t.Errorf("Ago(%v) = %q, want %q", d, got, want)
		}
	}
}

type memStore struct {
	mu   sync.Mutex
	objs map[string][]byte
	err  error
}

func (m *memStore) Get(_ context.Context, p string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return nil, m.err
	}
	b, ok := m.objs[p]
	if !ok {
		return nil, fmt.Errorf("%s: %w", p, ErrNotFound)
	}
	return b, nil
}

func (m *memStore) Put(_ context.Context, p string, b []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.objs == nil {
		m.objs = map[string][]byte{}
	}
	m.objs[p] = b
	return nil
}

// TestLookup: no entry, then a hit after Save, a miss explained against
// the last components after a change, a miss when the outputs are gone,
// and a miss, never an error, for an entry that does not parse or a store
// that cannot be read.
func TestLookup(t *testing.T) {
	ctx := context.Background()
	st := &memStore{}
	c := base()
	if r := Lookup(ctx, st, "p", "train", c, nil); r.Hit || r.Reason != ReasonNoEntry {
		t.Fatalf("empty cache: %+v", r)
	}
	e := Entry{Components: c, Outputs: map[string]any{"model_uri": "s3://b/m/1"}, Run: "run-1", Node: "train", Attempt: 1, Worker: "w1", Time: time.Now()}
	if err := Save(ctx, st, "p", e); err != nil {
		t.Fatal(err)
	}
	r := Lookup(ctx, st, "p", "train", base(), nil)
	if !r.Hit || r.Entry.Run != "run-1" || r.Entry.Outputs["model_uri"] != "s3://b/m/1" {
		t.Fatalf("after save: %+v", r)
	}
	changed := base()
	changed.With["seed"] = "2"
	if r := Lookup(ctx, st, "p", "train", changed, nil); r.Hit || r.Reason != "param seed 1 -> 2" {
		t.Errorf("changed seed: %+v", r)
	}
	gone := func(context.Context, map[string]any) (string, error) { return "checkpoint s3://b/m/1 was removed", nil }
	if r := Lookup(ctx, st, "p", "train", base(), gone); r.Hit || r.Reason != "cached result of run run-1 is gone: checkpoint s3://b/m/1 was removed" {
		t.Errorf("gone outputs: %+v", r)
	}
	st.objs[EntryPath(c.Key())] = []byte("{not json")
	if r := Lookup(ctx, st, "p", "train", base(), nil); r.Hit || !strings.Contains(r.Reason, "unreadable") {
		t.Errorf("garbage entry: %+v", r)
	}
	st.objs[EntryPath(c.Key())] = []byte(`{"format": 99}`)
	if r := Lookup(ctx, st, "p", "train", base(), nil); r.Hit || !strings.Contains(r.Reason, "format 99") {
		t.Errorf("future format: %+v", r)
	}
	st.err = fmt.Errorf("connection refused")
	if r := Lookup(ctx, st, "p", "train", base(), nil); r.Hit || !strings.Contains(r.Reason, "connection refused") {
		t.Errorf("unreadable store: %+v", r)
	}
}

func TestFileInputs(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("train.py", "print(1)")
	write("lib/util.py", "x = 1")
	argv := []string{"python3", "train.py", "--epochs", "2", "/nonexistent/file"}
	a, err := FileInputs(dir, argv, []string{"lib/*.py"})
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 2 || a["file train.py"] == "" || a["file lib/util.py"] == "" {
		t.Fatalf("inputs %v", a)
	}
	write("lib/util.py", "x = 2")
	b, _ := FileInputs(dir, argv, []string{"lib/*.py"})
	got := Diff(Components{Inputs: a}, Components{Inputs: b})
	if len(got) != 1 || got[0] != "lib/util.py changed" {
		t.Errorf("edited import: %q", got)
	}
	if _, err := FileInputs(dir, nil, []string{"[bad"}); err == nil {
		t.Error("a malformed glob passed")
	}
}
