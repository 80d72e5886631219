package pipetest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestWaitForHoldsInATest: a case runs a pipeline that waits for its data
// as if the data were there; it reads no lake.
func TestWaitForHoldsInATest(t *testing.T) {
	dir := t.TempDir()
	spec := `name: waits
wait_for:
  - {table: features.user_daily, deadline: 6h}
nodes:
  - id: train
    type: command
    with: {argv: [python3, train.py]}
`
	tests := `cases:
  - name: data ready
    logical_date: "2026-11-27"
    stubs:
      train: {outputs: {}}
    expect: {status: succeeded}
`
	if err := os.WriteFile(filepath.Join(dir, "waits.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "waits.test.yaml")
	if err := os.WriteFile(path, []byte(tests), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(Options{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep := r.RunFiles(context.Background(), []string{path}, &out)
	if rep.Failed() != 0 {
		t.Fatalf("failed:\n%s", out.String())
	}
}
