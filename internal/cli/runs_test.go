package cli

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/runs"
)

func TestPrintRuns(t *testing.T) {
	start := time.Date(2026, 11, 20, 3, 0, 0, 0, time.Local)
	end := start.Add(4*time.Minute + 5*time.Second)
	list := []runs.RunInfo{
		{ID: "ctr-retrain-20261120-030000-abc123", Pipeline: "ctr-retrain", LogicalDate: "2026-11-19", Status: runs.StatusSucceeded,
			StartedAt: start, EndedAt: &end, Gate: "passed", Deployed: "ctr@v3"},
		{ID: "hello-1", Pipeline: "hello", Status: runs.StatusRunning, StartedAt: start},
	}
	var b bytes.Buffer
	PrintRuns(&b, list, start.Add(90*time.Second))
	want := `RUN                                 PIPELINE     LOGICAL DATE  STATUS     STARTED              DURATION  GATE    DEPLOYED
ctr-retrain-20261120-030000-abc123  ctr-retrain  2026-11-19    succeeded  2026-11-20 03:00:00  4m05s     passed  ctr@v3
hello-1                             hello        -             running    2026-11-20 03:00:00  1m30s     -       -
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	// A rerun in the list adds the column naming the run it reused.
	b.Reset()
	list[1].ReusedFrom = "hello-0"
	PrintRuns(&b, list, start.Add(90*time.Second))
	if lines := strings.Split(b.String(), "\n"); !strings.HasSuffix(lines[0], "REUSED FROM") ||
		!strings.HasSuffix(lines[1], "ctr@v3    -") || !strings.HasSuffix(lines[2], "hello-0") {
		t.Errorf("with a rerun:\n%s", b.String())
	}
	b.Reset()
	PrintRuns(&b, nil, start)
	if b.String() != "no runs\n" {
		t.Errorf("empty list: %q", b.String())
	}
}

func TestBar(t *testing.T) {
	for _, c := range []struct {
		done, total, width int
		want               string
	}{
		{0, 8, 8, "[........]"},
		{3, 8, 8, "[###.....]"},
		{8, 8, 8, "[########]"},
		{9, 8, 4, "[####]"}, // clamped
		{1, 3, 10, "[###.......]"},
		{1, 0, 10, ""},
	} {
		if got := Bar(c.done, c.total, c.width); got != c.want {
			t.Errorf("Bar(%d, %d, %d) = %q, want %q", c.done, c.total, c.width, got, c.want)
		}
	}
}

func TestProgressText(t *testing.T) {
	now := time.Date(2026, 11, 20, 3, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		p    nodeProgress
		want string
	}{
		{nodeProgress{Step: 1200, StepsPerSec: 410.4}, "step 1200, 410 steps/s"},
		{nodeProgress{Step: 50, Total: 200}, "[##......] step 50/200"},
		{nodeProgress{Step: 50, Total: 200, StepsPerSec: 10}, "[##......] step 50/200, 10 steps/s, ETA 15.0s"},
		{nodeProgress{Step: 700, Total: 44700, StepsPerSec: 40}, "[........] step 700/44700, 40 steps/s, ETA 18m20s"},
		{nodeProgress{Done: 3, Of: 8, Unit: "bucket groups", Round: 2}, "[###.....] 3/8 bucket groups (round 2)"},
		{nodeProgress{Attempt: 2}, "attempt 2"},
		{nodeProgress{Attempt: 1}, ""},
		{nodeProgress{Step: 80, BeatAt: now.Add(-12500 * time.Millisecond)}, "step 80, as of 12.0s ago"},
		{nodeProgress{Step: 80, BeatAt: now.Add(-2 * time.Second)}, "step 80"},
	} {
		if got := progressText(c.p, 8, now); got != c.want {
			t.Errorf("progressText(%+v) = %q, want %q", c.p, got, c.want)
		}
	}
}

func TestFrame(t *testing.T) {
	t0 := time.Date(2026, 11, 20, 3, 0, 0, 0, time.UTC)
	at := func(s float64) *time.Time { x := t0.Add(time.Duration(s * float64(time.Second))); return &x }
	res := &runs.Result{ID: "r1", Pipeline: "ctr-retrain", Status: runs.StatusRunning, StartedAt: t0, Nodes: []runs.NodeState{
		{ID: "split", Status: runs.NodeSucceeded, StartedAt: at(0), EndedAt: at(1.5)},
		{ID: "train", Status: runs.NodeRunning, StartedAt: at(2)},
		{ID: "promote", Status: runs.NodeRunning, ScheduledAt: at(3)},
		{ID: "deploy", Status: runs.NodePending},
	}}
	got := Frame(res, map[string]nodeProgress{
		"train":   {Step: 700, StepsPerSec: 35},
		"promote": {Done: 2, Of: 4, Unit: "bucket groups"},
	}, t0.Add(22*time.Second))
	want := `run r1 (ctr-retrain): running 22.0s
  split    succeeded     1.5s
  train    running      20.0s  step 700, 35 steps/s
  promote  running      19.0s  [############............] 2/4 bucket groups
  deploy   pending
`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"36h":                  now.Add(-36 * time.Hour),
		"7d":                   now.AddDate(0, 0, -7),
		"2026-11-01":           time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC),
		"2026-11-01T08:00:00Z": time.Date(2026, 11, 1, 8, 0, 0, 0, time.UTC),
	} {
		got, err := parseSince(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseSince(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"yesterday", "7x", "-d"} {
		if _, err := parseSince(bad, now); err == nil || !strings.Contains(err.Error(), "--since") {
			t.Errorf("parseSince(%q): %v", bad, err)
		}
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		850 * time.Millisecond:        "850ms",
		12300 * time.Millisecond:      "12.3s",
		4*time.Minute + 5*time.Second: "4m05s",
		2*time.Hour + 10*time.Minute:  "2h10m",
		76 * time.Hour:                "3d04h",
		-time.Second:                  "-",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestRunsListBadStatus(t *testing.T) {
	var out, errOut bytes.Buffer
	root := NewRoot(&App{Out: &out, Err: &errOut, LogLevel: "warn"}, "retrain")
	root.SetArgs([]string{"runs", "list", "--status", "done"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), `unknown run status "done"`) {
		t.Errorf("runs list --status done: %v", err)
	}
}

func TestCheckLogicalDate(t *testing.T) {
	for _, ok := range []string{"", "2026-10-05", "2026-10-05T02:00:00-07:00"} {
		if err := checkLogicalDate(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"2026-10-5", "yesterday", "2026-10-05 02:00"} {
		if err := checkLogicalDate(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestBackfillRefusesFilePath: `retrain backfill pipelines/x.yaml` says to
// name the pipeline, before it connects anywhere.
func TestBackfillRefusesFilePath(t *testing.T) {
	for _, bad := range []string{"pipelines/x.yaml", "x.yaml", "./x", `a\b`} {
		err := checkPipelineName(bad)
		if err == nil || !strings.Contains(err.Error(), "not a file") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if err := checkPipelineName("ctr-retrain"); err != nil {
		t.Errorf("a name: %v", err)
	}
}

// TestPrintSummaryRerun: a rerun's table says which run it reused and,
// per node, that a node was taken over or why it ran again.
func TestPrintSummaryRerun(t *testing.T) {
	res := &runs.Result{Pipeline: "p", Status: runs.StatusSucceeded, ReusedFrom: "r1", Nodes: []runs.NodeState{
		{ID: "a", Type: "step", Status: runs.NodeSucceeded, ReusedFrom: "r0", Outputs: map[string]any{"summary": "did a"}},
		{ID: "b", Type: "step", Status: runs.NodeSucceeded, NotReused: "failed in run r1", Outputs: map[string]any{"summary": "did b"}},
	}}
	var b bytes.Buffer
	PrintSummary(&b, res)
	for _, want := range []string{"reused from run r1: nodes a\n", "reused from run r0: did a", "ran again (failed in run r1): did b"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
}

// A pipeline whose gate rejected its latest scheduled runs gets a
// warning under `runs list`'s table: those runs are "succeeded" and
// shipped nothing.
func TestPrintRejectedStreaks(t *testing.T) {
	start := time.Date(2026, 11, 20, 3, 0, 0, 0, time.UTC)
	list := []runs.RunInfo{}
	for i := 3; i >= 1; i-- {
		list = append(list, runs.RunInfo{ID: fmt.Sprintf("ctr-retrain-2026112%d", i), Pipeline: "ctr-retrain", Schedule: "daily",
			Status: runs.StatusSucceeded, StartedAt: start, Gate: "rejected"})
	}
	list = append(list, runs.RunInfo{ID: "ctr-retrain-20261120", Pipeline: "ctr-retrain", Schedule: "daily",
		Status: runs.StatusSucceeded, StartedAt: start, Gate: "passed", Deployed: "ctr@v3"})
	var b bytes.Buffer
	PrintRejectedStreaks(&b, runs.RejectedStreaks(list, runs.DefaultRejectedStreak))
	want := "warning: pipeline ctr-retrain: its gate rejected its last 3 scheduled runs in a row (ctr-retrain-20261123, ctr-retrain-20261122, ctr-retrain-20261121): nothing they trained shipped; `retrain status RUN` shows the failed checks\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	// Two in a row, under the threshold: no warning.
	b.Reset()
	PrintRejectedStreaks(&b, runs.RejectedStreaks(list[1:], runs.DefaultRejectedStreak))
	if b.Len() != 0 {
		t.Errorf("two rejections warned: %s", b.String())
	}
}
