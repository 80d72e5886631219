package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/worker"

	"github.com/retrain-ml/retrain/dags"
)

// TestValidate: this binary's validate accepts the example pipeline, which
// the built-in types alone (what `retrain dag validate` uses) refuse, and
// still catches a mistyped type with the custom one among the suggestions.
func TestValidate(t *testing.T) {
	const example = "pipelines/endpoint-check.yaml"
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"validate", example}, &out, &errOut); err != nil {
		t.Fatalf("validate %s: %v\n%s", example, err, errOut.String())
	}
	if want := example + ": ok (pipeline endpoint-check, 3 nodes)\n"; out.String() != want {
		t.Errorf("stdout %q, want %q", out.String(), want)
	}

	data, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dags.Load(example, data, worker.Types()); err == nil || !strings.Contains(err.Error(), `unknown type "http_check"`) {
		t.Errorf("built-in types on the example: %v, want unknown type http_check", err)
	}

	typo := filepath.Join(t.TempDir(), "typo.yaml")
	if err := os.WriteFile(typo, bytes.Replace(data, []byte("type: http_check"), []byte("type: http_chek"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errOut.Reset()
	err = run(context.Background(), []string{"validate", example, typo}, &out, &errOut)
	if err == nil || err.Error() != "1 of 2 specs invalid" {
		t.Fatalf("validate with a typo: %v", err)
	}
	if msg := errOut.String(); !strings.Contains(msg, `unknown type "http_chek"`) || !strings.Contains(msg, `did you mean "http_check"`) {
		t.Errorf("typo message %q", msg)
	}
}

func TestWorkerRefusesStrayArguments(t *testing.T) {
	var errOut bytes.Buffer
	err := run(context.Background(), []string{"pipelines/endpoint-check.yaml"}, &errOut, &errOut)
	if err == nil || !strings.Contains(err.Error(), "customnode validate") {
		t.Fatalf("stray argument: %v", err)
	}
}
