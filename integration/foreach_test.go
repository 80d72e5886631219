package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/worker"
)

// TestForeachScale runs a foreach of noop instances through the real
// server and measures wall time, the time per instance, and the event
// count of the largest history (the pipeline's and each chunk's), against
// a static fan-out of noop nodes: 1,000 instances against 500 nodes, and
// in the long form (RETRAIN_LONG_TESTS=1) 10,000 against 1,000 (Temporal's
// limits: 51,200 events, 50 MB a history).
func TestForeachScale(t *testing.T) {
	// The long form runs alone, before the parallel tests: it takes about
	// 25 s and 42 CPU-seconds alone, and took 540-600 s beside them in CI
	// (starved of CPU, on the shared server or its own), ending the
	// package last.
	if os.Getenv(longTestsEnv) != "1" {
		parallelFor(t, 45*time.Second)
	}
	// On a stack of its own, so that its thousands of activities never
	// sit in front of other tests' calls on the shared server's one
	// SQLite connection and history shard.
	stack, c := ownStack(t)
	queue := newQueue(t)
	startWorkerOn(t, c, stack.Namespace(), worker.Config{TaskQueue: queue})
	// The long form's 10,000 instances are 40 chunk workflows; the short
	// form's 1,000 are 4 of the same chunks, against a static fan-out of
	// 500.
	n, fan, limit := 1000, 500, 5*time.Minute
	if longTests(t) {
		// Beside the whole package in CI this has taken 370-545 s, most
		// of it waiting for the shared server and the 2 cores.
		n, fan, limit = 10000, 1000, 15*time.Minute
	}
	const par = 64

	var static strings.Builder
	fmt.Fprintf(&static, "name: static_fan\nparallelism: %d\nnodes:\n  - {id: start, type: noop}\n", par)
	for i := range fan {
		fmt.Fprintf(&static, "  - {id: n%04d, type: noop, needs: [start]}\n", i)
	}
	t0 := time.Now()
	res := runRequestOn(t, c, runs.Request{Spec: []byte(static.String()), SpecFile: "static.yaml", TaskQueue: queue}, 3*time.Minute)
	staticWall := time.Since(t0)
	wantStatus(t, res, runs.StatusSucceeded)
	staticEvents := historyEvents(t, c, res.ID)

	items := make([]any, n)
	for i := range items {
		items[i] = i
	}
	spec := fmt.Sprintf(`name: foreach_scale
params:
  items: {type: list}
parallelism: %d
nodes:
  - id: work
    type: noop
    foreach: ${params.items}
  - id: after
    type: noop
    needs: [work]
`, par)
	t0 = time.Now()
	res = runRequestOn(t, c, runs.Request{Spec: []byte(spec), SpecFile: "foreach.yaml", TaskQueue: queue,
		Params: map[string]any{"items": items}}, limit)
	wall := time.Since(t0)
	wantStatus(t, res, runs.StatusSucceeded)
	w := node(t, res, "work")
	if w.Outputs["count"] != float64(n) {
		t.Fatalf("count = %v, want %d", w.Outputs["count"], n)
	}
	largest, largestID := historyEvents(t, c, res.ID), res.ID
	for lo := 0; lo < n; lo += 250 {
		id := fmt.Sprintf("%s/work[%d:%d]", res.ID, lo, min(lo+250, n))
		if e := historyEvents(t, c, id); e > largest {
			largest, largestID = e, id
		}
	}
	t.Logf("static fan-out of %d noops: %v (%v a node), %d events", fan, staticWall.Round(time.Millisecond), (staticWall / time.Duration(fan)).Round(time.Microsecond), staticEvents)
	t.Logf("foreach of %d noops: %v (%v an instance); largest history %s: %d events", n, wall.Round(time.Millisecond),
		(wall / time.Duration(n)).Round(time.Microsecond), largestID, largest)
	if largest > 51200/4 {
		t.Errorf("largest history has %d events", largest)
	}
}

func historyEvents(t *testing.T, c client.Client, id string) int {
	t.Helper()
	iter := c.GetWorkflowHistory(context.Background(), id, "", false, 0)
	n := 0
	for iter.HasNext() {
		if _, err := iter.Next(); err != nil {
			t.Fatalf("history of %s: %v", id, err)
		}
		n++
	}
	return n
}
