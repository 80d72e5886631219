package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `retrain test` exits 1 on a failed case and writes --junit.
func TestTestCommandExitAndJUnit(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("p.yaml", "name: p\nnodes:\n  - {id: a, type: noop, with: {x: 1}}\n  - {id: b, type: noop, needs: [a]}\n")
	write("p.test.yaml", `cases:
  - name: passes
    stubs: {a: run, b: run}
    expect: {status: succeeded, nodes: {a: {outputs: {x: 1}}}}
  - name: b unstubbed
    stubs: {a: run}
    expect: {status: succeeded}
`)
	var out bytes.Buffer
	app := &App{Out: &out, Err: &out}
	cmd := NewTestCommand(app)
	junit := filepath.Join(dir, "junit.xml")
	cmd.SetArgs([]string{dir, "--junit", junit})
	err := cmd.ExecuteContext(context.Background())
	var exit *ExitError
	if !errors.As(err, &exit) || exit.Code != 1 {
		t.Fatalf("err = %v, want exit 1\n%s", err, out.String())
	}
	for _, want := range []string{"PASS ", "p / passes", "FAIL ", "node b (type noop) has no stub", "FAIL: 1 of 2 cases failed"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	x, err := os.ReadFile(junit)
	if err != nil || !strings.Contains(string(x), `<testsuites tests="2" failures="1"`) {
		t.Errorf("junit: %v\n%s", err, x)
	}
}
