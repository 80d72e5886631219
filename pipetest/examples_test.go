package pipetest

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestExamples runs the test files of the repository's examples, as
// `retrain test examples dags/examples` does, and checks that every case
// passes and that the cases the docs point to are there.
func TestExamples(t *testing.T) {
	t.Chdir("..") // the examples' commands name paths from the repository root
	files, err := Find([]string{"examples", "dags/examples"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(Options{AllowCommands: []string{"sh", "echo"}})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	started := time.Now()
	rep := r.RunFiles(context.Background(), files, &out)
	t.Logf("%s(%s)", out.String(), time.Since(started).Round(time.Millisecond))
	if rep.Failed() > 0 {
		t.Fatalf("%d cases failed:\n%s", rep.Failed(), out.String())
	}
	for _, want := range []string{
		"scripts-retrain / gate passes and deploys",
		"scripts-retrain / gate rejects a worse model and deploy is skipped",
		"scripts-retrain / train fails twice and succeeds under its retry policy",
		"ctr-canary / healthy steps promote the candidate",
		"ctr-canary / a breach at step 2 rolls back and runs on_failure",
		"ctr-canary / approved mid-bake, the canary promotes at once",
		"daily-features / one failing day fails the node after the others finish",
	} {
		if !strings.Contains(out.String(), "PASS ") || !strings.Contains(out.String(), want) {
			t.Errorf("no case %q in:\n%s", want, out.String())
		}
	}
}
