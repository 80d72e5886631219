package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/runs"
)

// TestCacheNotes: the node table gets a CACHE column when a node is
// cached, saying how it was served or why it was computed; the live
// frame says the same; a run without cached nodes keeps its columns.
func TestCacheNotes(t *testing.T) {
	now := time.Now()
	at := now.Add(-72 * time.Hour)
	res := &runs.Result{ID: "r2", Pipeline: "p", Status: runs.StatusSucceeded, StartedAt: now, Nodes: []runs.NodeState{
		{ID: "split", Type: "split", Status: runs.NodeSucceeded, Cache: &runs.NodeCache{Hit: true, Run: "r1", Time: &at}},
		{ID: "train", Type: "train", Status: runs.NodeSucceeded, Attempts: 1, Cache: &runs.NodeCache{Reason: "param epochs 2 -> 3"}},
		{ID: "deploy", Type: "deploy", Status: runs.NodeSucceeded, Attempts: 1},
	}}
	var b bytes.Buffer
	PrintSummary(&b, res)
	out := b.String()
	for _, want := range []string{"CACHE", "cached (run r1, 3 days ago)", "cache miss: param epochs 2 -> 3"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	frame := Frame(res, nil, now)
	if !strings.Contains(frame, "cached (run r1, 3 days ago)") || !strings.Contains(frame, "cache miss: param epochs 2 -> 3") {
		t.Errorf("frame:\n%s", frame)
	}
	b.Reset()
	for i := range res.Nodes {
		res.Nodes[i].Cache = nil
	}
	PrintSummary(&b, res)
	if strings.Contains(b.String(), "CACHE") {
		t.Errorf("a run without cached nodes got a CACHE column:\n%s", b.String())
	}
}
