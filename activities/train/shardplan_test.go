package train

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
)

// shardPlanDriver runs examples/torch/shardplan.py (numpy only: no torch
// to import) on the cases given as JSON on stdin and prints, per case,
// every step's rows of every rank and the position after every step.
const shardPlanDriver = `
import json, sys
sys.path.insert(0, sys.argv[1])
import shardplan
out = []
for c in json.load(sys.stdin):
    rest = c.get("rest")
    try:
        segs, warn = shardplan.segments(c["epochs"], c["batch"], c["rows"], rest=tuple(rest) if rest else None,
                                        resumed=c.get("resumed"), steps_done=c.get("first", 0))
    except ValueError as e:
        out.append({"error": str(e)})
        continue
    plan = shardplan.Plan(segs, c.get("first", 0), c["batch"], c["every"], 7, limit=c.get("limit", 0))
    steps = []
    for i in range(plan.first, plan.total):
        k = plan.seg_of(i)
        steps.append({"seg": k, "rows": [[int(v) for v in plan.rows(i, r)] for r in range(len(segs[k].rows))],
                      "pos": plan.position(i + 1)})
    out.append({"segs": [{"phase": s.phase, "epoch": s.epoch, "rows": s.rows, "start": s.start, "steps": s.steps} for s in segs],
                "total": plan.total, "first": plan.first, "steps": steps, "warn": warn})
print(json.dumps(out))
`

type planCase struct {
	Epochs  int            `json:"epochs"`
	Batch   int            `json:"batch"`
	Every   int            `json:"every"`
	Rows    []int          `json:"rows"`
	Rest    []any          `json:"rest,omitempty"`
	Resumed map[string]any `json:"resumed,omitempty"`
	First   int            `json:"first,omitempty"`
	Limit   int            `json:"limit,omitempty"`
}

type planOut struct {
	Error string `json:"error"`
	Segs  []struct {
		Phase string `json:"phase"`
		Epoch int    `json:"epoch"`
		Rows  []int  `json:"rows"`
		Start []int  `json:"start"`
		Steps int    `json:"steps"`
	} `json:"segs"`
	Total, First int
	Steps        []struct {
		Seg  int     `json:"seg"`
		Rows [][]int `json:"rows"`
		Pos  struct {
			World int    `json:"world"`
			Phase string `json:"phase"`
			Epoch int    `json:"epoch"`
			Done  []int  `json:"done"`
		} `json:"pos"`
	} `json:"steps"`
	Warn *string `json:"warn"`
}

func runShardPlan(t *testing.T, cases []planCase) []planOut {
	t.Helper()
	py := os.Getenv("RETRAIN_PYTHON")
	if py == "" {
		py = "/usr/bin/python3"
	}
	if b, err := exec.Command(py, "-c", "import numpy").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import numpy (%v: %s): apt-get install python3-numpy, or set RETRAIN_PYTHON", py, err, bytes.TrimSpace(b))
	}
	in, _ := json.Marshal(cases)
	cmd := exec.Command(py, "-c", shardPlanDriver, example(t, ""))
	cmd.Stdin = bytes.NewReader(in)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("shardplan.py: %v\n%s", err, stderr.Bytes())
	}
	var out []planOut
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if len(out) != len(cases) {
		t.Fatalf("%d results for %d cases", len(out), len(cases))
	}
	return out
}

// TestShardPlan: train.py's plan of a sharded rank's steps (shardplan.py).
// In every segment (an epoch, or the rest of one) each rank trains each
// row of its share from where it stood once, at most batch rows a step;
// the ranks run the same steps; at every checkpoint (every `every` steps,
// and at the end) the position says how many rows each rank trained of
// the segment, and those are the first ones of its share: a prefix, so a
// gang resumed with another world size can train the rest; between
// checkpoints the rows are shuffled.
func TestShardPlan(t *testing.T) {
	cases := []planCase{
		// A fresh gang of 2 uneven shares, 2 epochs, a checkpoint every 3 steps.
		{Epochs: 2, Batch: 125, Every: 3, Rows: []int{1000, 870}},
		// Resumed with another world size: the rest of epoch 0 first (a
		// rank with no rows of it, one resumed part way), then epoch 1.
		{Epochs: 2, Batch: 40, Every: 4, Rows: []int{700, 650, 690}, Rest: []any{0, []int{300, 0, 250}, []int{0, 0, 100}}, First: 30},
		// Resumed with the same world size within epoch 1 of 3.
		{Epochs: 3, Batch: 50, Every: 5, Rows: []int{400, 380}, First: 12,
			Resumed: map[string]any{"world": 2, "phase": "full", "epoch": 1, "done": []int{250, 250}}},
		// --steps ends the run mid-window: the last checkpoint is a prefix too.
		{Epochs: 1, Batch: 10, Every: 8, Rows: []int{200, 200}, Limit: 13},
		// One rank (a gang of one with shard_data).
		{Epochs: 1, Batch: 64, Every: 2, Rows: []int{500}},
	}
	wantSegs := [][]string{{"full 0", "full 1"}, {"rest 0", "full 1"}, {"full 1", "full 2"}, {"full 0"}, {"full 0"}}
	for ci, out := range runShardPlan(t, cases) {
		c := cases[ci]
		if out.Error != "" {
			t.Fatalf("case %d: %s", ci, out.Error)
		}
		var segs []string
		sum := out.First
		for _, s := range out.Segs {
			segs = append(segs, fmt.Sprintf("%s %d", s.Phase, s.Epoch))
			sum += s.Steps
		}
		if !slices.Equal(segs, wantSegs[ci]) {
			t.Errorf("case %d: segments %v, want %v", ci, segs, wantSegs[ci])
		}
		wantTotal := sum
		if c.Limit > 0 && c.Limit < sum {
			wantTotal = c.Limit
		}
		if out.Total != wantTotal || len(out.Steps) != wantTotal-out.First {
			t.Fatalf("case %d: total %d over %d steps, want %d", ci, out.Total, len(out.Steps), wantTotal)
		}
		// trained[seg][rank]: the rows trained so far, in order.
		trained := make([][][]int, len(out.Segs))
		for k, s := range out.Segs {
			trained[k] = make([][]int, len(s.Rows))
		}
		shuffled := false
		for i, st := range out.Steps {
			n := out.First + i + 1
			seg := out.Segs[st.Seg]
			if len(st.Rows) != len(seg.Rows) {
				t.Fatalf("case %d step %d: %d ranks' rows, want %d", ci, n, len(st.Rows), len(seg.Rows))
			}
			for r, rows := range st.Rows {
				if len(rows) > c.Batch {
					t.Fatalf("case %d step %d rank %d: %d rows, batch %d", ci, n, r, len(rows), c.Batch)
				}
				for j := 1; j < len(rows); j++ {
					shuffled = shuffled || rows[j] < rows[j-1]
				}
				trained[st.Seg][r] = append(trained[st.Seg][r], rows...)
			}
			if n%c.Every != 0 && n != out.Total {
				continue
			}
			// A checkpoint: the position is what was trained, a prefix.
			if st.Pos.Phase != seg.Phase || st.Pos.Epoch != seg.Epoch || st.Pos.World != len(seg.Rows) {
				t.Fatalf("case %d step %d: position %+v in segment %s %d", ci, n, st.Pos, seg.Phase, seg.Epoch)
			}
			for r := range seg.Rows {
				if !isRange(trained[st.Seg][r], seg.Start[r], st.Pos.Done[r]) {
					t.Fatalf("case %d step %d rank %d: position %d, but it trained %v from %d: not the prefix",
						ci, n, r, st.Pos.Done[r], trained[st.Seg][r], seg.Start[r])
				}
			}
		}
		if c.Limit > 0 {
			continue
		}
		for k, s := range out.Segs {
			for r := range s.Rows {
				if !isRange(trained[k][r], s.Start[r], s.Rows[r]) {
					t.Errorf("case %d segment %s %d rank %d: trained %v, want each row of [%d, %d) once",
						ci, s.Phase, s.Epoch, r, trained[k][r], s.Start[r], s.Rows[r])
				}
			}
		}
		if !shuffled {
			t.Errorf("case %d: every step's rows in their share's order: want them shuffled within a window", ci)
		}
	}
	// Bad positions name the problem.
	bad := runShardPlan(t, []planCase{{Epochs: 1, Batch: 4, Every: 2, Rows: []int{10, 10}, Rest: []any{0, []int{5, 5}, []int{0, 6}}}})
	if bad[0].Error == "" {
		t.Errorf("a rest done past its rest share: no error")
	}
	t.Logf("a rest done past its share: %s", bad[0].Error)
}

// isRange reports whether got holds each of lo..hi-1 once.
func isRange(got []int, lo, hi int) bool {
	if len(got) != hi-lo {
		return false
	}
	seen := make(map[int]bool, len(got))
	for _, v := range got {
		if v < lo || v >= hi || seen[v] {
			return false
		}
		seen[v] = true
	}
	return true
}
