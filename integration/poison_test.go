package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/runs"
)

// TestPoisonSpecFromWebUI sends the input that used to kill workers through
// the Web UI's start request: a spec whose `when` is ~600 KB of "(". The
// parser's stack overflowed (a fatal error, not a panic), the worker died
// and every restart died again on the same workflow task. Now the run fails
// with a validation error, and the same worker then runs a normal pipeline.
func TestPoisonSpecFromWebUI(t *testing.T) {
	queue := newQueue(t)
	startWorker(t, queue)

	spec := "name: poison\nnodes:\n  - id: a\n    type: noop\n    when: \"" + strings.Repeat("(", 600<<10) + "\"\n"
	input, _ := json.Marshal(map[string]any{"spec": spec})
	id := startFromUI(t, queue, "poison-ui", string(input))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := runs.Wait(ctx, tclient, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, runs.StatusFailed)
	want := `node "a": when: condition is 614400 bytes long; the limit is 4096`
	if len(res.Nodes) != 0 || !strings.Contains(res.Error, want) {
		t.Fatalf("poison run: %d nodes, error %q; want %q", len(res.Nodes), res.Error, want)
	}

	id = startFromUI(t, queue, "hello-after-poison", `{"pipeline": "hello"}`)
	res, err = runs.Wait(ctx, tclient, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, runs.StatusSucceeded)
}
