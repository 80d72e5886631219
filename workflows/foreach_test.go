package workflows

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/runs"
)

func TestForeachRunsInstancesInOrder(t *testing.T) {
	h := newHarness(t)
	res := h.succeed(`
name: fe
params:
  markets: {type: list, default: [us, de, fr, jp]}
nodes:
  - id: prep
    type: step
    with: {suffix: "-v1"}
  - id: train
    type: step
    needs: [prep]
    foreach: ${params.markets}
    max_parallel: 2
    when: ${item} != "fr"
    with: {market: "${item}", i: "${item_index}", tag: "${item}${nodes.prep.outputs.suffix}"}
  - id: report
    type: step
    needs: [train]
    with: {all: "${nodes.train.outputs.items}", n: "${nodes.train.outputs.count}"}
`, nil, nil)
	// The node's own time spans its instances' (the report and the UI
	// show it), not the zero time.
	if tr := wantNode(t, res, "train", runs.NodeSucceeded, 1); tr.StartedAt == nil || tr.StartedAt.IsZero() || tr.EndedAt.Before(*tr.StartedAt) {
		t.Errorf("train times %v..%v", tr.StartedAt, tr.EndedAt)
	}
	wantNode(t, res, "train[0]", runs.NodeSucceeded, 1)
	wantNode(t, res, "train[2]", runs.NodeSkipped, 0)
	if got := wantNode(t, res, "train[3]", runs.NodeSucceeded, 1).Outputs["tag"]; got != "jp-v1" {
		t.Errorf("train[3] tag = %v", got)
	}
	rep := wantNode(t, res, "report", runs.NodeSucceeded, 1)
	if rep.Outputs["n"] != float64(4) {
		t.Errorf("count = %v", rep.Outputs["n"])
	}
	all, _ := rep.Outputs["all"].([]any)
	if len(all) != 4 || !reflect.DeepEqual(all[2], map[string]any{}) ||
		all[1].(map[string]any)["market"] != "de" || all[1].(map[string]any)["i"] != float64(1) {
		t.Errorf("items = %v", all)
	}
	if h.maxInFly.Load() > 2 {
		t.Errorf("%d instances ran at once; max_parallel is 2", h.maxInFly.Load())
	}
}

func TestForeachFailFast(t *testing.T) {
	for _, failFast := range []bool{true, false} {
		t.Run(fmt.Sprint(failFast), func(t *testing.T) {
			h := newHarness(t)
			_, err := h.run(fmt.Sprintf(`
name: fe
params:
  n: {type: list, default: [0, 1, 2, 3, 4, 5]}
nodes:
  - id: work
    type: step
    foreach: ${params.n}
    max_parallel: 1
    fail_fast: %v
    retry: {max_attempts: 1}
    with: {fail: "${item_index}"}
  - id: after
    type: step
    needs: [work]
`, failFast), nil, nil)
			res := mustFail(t, err)
			wantNode(t, res, "work", runs.NodeFailed, -1)
			wantNode(t, res, "after", runs.NodeCancelled, 0)
			if !strings.Contains(res.Error, "work[") {
				t.Errorf("error %q names no instance", res.Error)
			}
			wantNode(t, res, "work[0]", runs.NodeSucceeded, 1)
			wantNode(t, res, "work[1]", runs.NodeFailed, 1)
			if failFast {
				wantNode(t, res, "work[2]", runs.NodeCancelled, 0)
			} else {
				wantNode(t, res, "work[5]", runs.NodeFailed, 1)
				if !strings.Contains(res.Error, "5 of 6 instances failed") {
					t.Errorf("error %q", res.Error)
				}
			}
			_ = dags.InstanceID
		})
	}
}

// TestForeachChunks: more items than a chunk holds run in several child
// workflows, and every instance comes back in order.
func TestForeachChunks(t *testing.T) {
	h := newHarness(t)
	n := foreachChunkSize*2 + 7
	items := make([]any, n)
	for i := range items {
		items[i] = i
	}
	res := h.succeed(`
name: fe
params:
  n: {type: list}
parallelism: 300
nodes:
  - id: work
    type: step
    foreach: ${params.n}
    with: {v: "${item}"}
`, map[string]any{"n": items}, nil)
	w := wantNode(t, res, "work", runs.NodeSucceeded, 1)
	if w.Outputs["count"] != float64(n) {
		t.Fatalf("count = %v", w.Outputs["count"])
	}
	all := w.Outputs["items"].([]any)
	for i, o := range all {
		if o.(map[string]any)["v"] != float64(i) {
			t.Fatalf("items[%d] = %v", i, o)
		}
	}
	if got := len(res.Nodes); got != 1+n {
		t.Errorf("%d node states, want %d", got, 1+n)
	}
}
