package dags

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// testRegistry is a small registry like the worker's: a command type with
// fixed outputs, a noop type with no fields and dynamic outputs, and a
// shell type with open outputs.
func testRegistry(t testing.TB) *Registry {
	t.Helper()
	reg, err := NewRegistry(
		NodeType{
			Name: "command",
			Fields: []Field{
				{Name: "argv", Type: FieldStringList, Required: true},
				{Name: "env", Type: FieldStringMap},
				{Name: "dir", Type: FieldString},
				{Name: "ok_exit_codes", Type: FieldIntList},
			},
			Outputs: []string{"exit_code", "stdout", "stderr"},
		},
		NodeType{Name: "noop"},
		// shell is a command whose outputs are open: its own three plus
		// whatever the program writes (see Node.Outputs).
		NodeType{
			Name: "shell",
			Fields: []Field{
				{Name: "argv", Type: FieldStringList, Required: true},
				{Name: "dir", Type: FieldString},
			},
			Outputs:     []string{"exit_code", "stdout", "stderr"},
			OpenOutputs: true,
		},
		NodeType{
			Name:  "train",
			Kind:  KindWorkflow,
			Queue: "gpu",
			Fields: []Field{
				{Name: "epochs", Type: FieldInt, Required: true},
				{Name: "lr", Type: FieldNumber},
				{Name: "resume", Type: FieldBool},
				{Name: "budget", Type: FieldDuration},
				{Name: "extra", Type: FieldAny},
			},
			Outputs: []string{"model", "auc"},
			Check: func(with map[string]any) error {
				if e, ok := with["epochs"].(int); ok && e > 1000 {
					return fmt.Errorf("epochs must be at most 1000, got %d", e)
				}
				return nil
			},
		},
		NodeType{
			Name:     "script",
			Fields:   []Field{{Name: "code", Type: FieldString, Required: true}},
			OpenWith: true,
		},
	)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

const exampleSpec = `name: example
params:
  date: {type: string, default: "2026-01-01"}
defaults:
  retry: {max_attempts: 3, initial_interval: 1s, backoff: 2.0, max_interval: 1m}
  timeout: 10m
nodes:
  - id: a
    type: command
    with: {argv: ["sh", "-c", "echo hello"]}
  - id: b
    type: command
    needs: [a]
    with: {argv: ["echo", "${params.date}", "${nodes.a.outputs.stdout}"]}
    retry: {max_attempts: 5}
  - id: c
    type: command
    needs: [a]
    when: "${nodes.a.outputs.exit_code} == 0"
    with: {argv: ["true"]}
`

func mustParse(t *testing.T, src string) *Spec {
	t.Helper()
	s, err := Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return s
}

// errorCase is one spec that must fail with a message containing want, at
// line (0: any line).
type errorCase struct {
	name string
	src  string
	want string
	line int
}

// checkError checks that err is an ErrorList holding an error for file
// "test.yaml" whose message contains want, at line.
func checkError(t *testing.T, err error, want string, line int) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want %q", want)
	}
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("error %T is not an ErrorList: %v", err, err)
	}
	for _, e := range list {
		if !strings.Contains(e.Msg, want) {
			continue
		}
		if e.File != "test.yaml" {
			t.Errorf("error %q: file %q, want test.yaml", e.Msg, e.File)
		}
		if line != 0 && e.Line != line {
			t.Errorf("error %q at line %d, want line %d", e.Msg, e.Line, line)
		}
		return
	}
	t.Errorf("no error contains %q; got:\n%v", want, err)
}
