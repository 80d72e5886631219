package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/runs"
)

func waitingRun(now time.Time) *runs.Result {
	return &runs.Result{ID: "nightly-1", Pipeline: "nightly", Status: runs.StatusWaiting, StartedAt: now.Add(-3 * time.Minute),
		Nodes: []runs.NodeState{{ID: "train", Type: "train", Status: runs.NodePending}},
		Waiting: []runs.Waiting{{Condition: "table features.user_daily", Checks: 4, Since: now.Add(-3 * time.Minute), Deadline: now.Add(time.Hour),
			Saw: "features.user_daily has no rows for 2026-11-27 (last snapshot 11-27 01:12, 2,341 rows for 11-26)"}}}
}

const wantWait = "waiting for data: features.user_daily has no rows for 2026-11-27 (last snapshot 11-27 01:12, 2,341 rows for 11-26) " +
	"[table features.user_daily, 4 checks over 3m0s, deadline in 1h0m0s]"

func TestWaitingShown(t *testing.T) {
	now := time.Now()
	res := waitingRun(now)
	frame := Frame(res, nil, now)
	if !strings.Contains(frame, "run nightly-1 (nightly): WAITING") || !strings.Contains(frame, "  "+wantWait+"\n") {
		t.Errorf("follow frame:\n%s", frame)
	}
	var b bytes.Buffer
	PrintSummary(&b, res)
	if !strings.HasPrefix(b.String(), "pipeline nightly: WAITING\n") || !strings.Contains(b.String(), wantWait) {
		t.Errorf("status:\n%s", b.String())
	}
	b.Reset()
	PrintRuns(&b, []runs.RunInfo{
		{ID: "nightly-1", Pipeline: "nightly", Status: runs.StatusWaiting, StartedAt: now, Waiting: res.Waiting[0].Text(now)},
		{ID: "nightly-0", Pipeline: "nightly", Status: runs.StatusSkipped, StartedAt: now},
	}, now)
	lines := strings.Split(b.String(), "\n")
	if !strings.HasSuffix(lines[0], "WAITING FOR") || !strings.Contains(lines[1], "WAITING") ||
		!strings.Contains(lines[1], "has no rows for 2026-11-27") || !strings.Contains(lines[2], "skipped") {
		t.Errorf("runs list:\n%s", b.String())
	}
}
