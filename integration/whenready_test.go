package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/runs"
)

// TestWhenReadyScheduleBackfill backfills a when_ready schedule over
// three dates whose data lands at different times: the first date's
// files are there before the backfill, the last date's land while its
// run waits, the middle date's never land. The three runs start at once
// (a date without data holds back no other), one per date; the first and
// the last run their node once their files are there, and the middle one
// lists as WAITING, naming the condition and its date.
func TestWhenReadyScheduleBackfill(t *testing.T) {
	parallel(t)
	name, dir := "it-when-ready", t.TempDir()
	spec := fmt.Sprintf(`name: %s
wait_for:
  - {files: "%s/${run.logical_date}/*.csv", marker: _SUCCESS, deadline: 2m, poll: 1s}
schedules:
  - id: nightly-ready
    cron: "0 3 * * *"
    when_ready: true
    paused: true
nodes:
  - {id: work, type: command, with: {argv: [echo, "${run.logical_date} ${run.logical_time}"]}}
`, name, dir)
	e := newSchedEnv(t, map[string]string{name: spec})
	// land returns the time before the files are written: a run may see
	// them before land returns.
	land := func(date string) time.Time {
		at := time.Now()
		day := filepath.Join(dir, date)
		if err := os.MkdirAll(day, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"part-0.csv", "_SUCCESS"} {
			if err := os.WriteFile(filepath.Join(day, f), []byte("x\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return at
	}
	today := time.Now().UTC().Truncate(24 * time.Hour)
	var dates []string
	for i := 3; i >= 1; i-- {
		dates = append(dates, today.AddDate(0, 0, -i).Format(time.DateOnly))
	}
	first, missing, last := dates[0], dates[1], dates[2]
	landed := map[string]time.Time{first: land(first)}

	out, err := e.cli(t, "schedule", "apply", e.dir, "--task-queue", e.queue)
	if err != nil || !strings.Contains(out, "(cron 0 3 * * *, when ready from 00:00)") {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	out, err = e.cli(t, "schedule", "backfill", name+"/nightly-ready", "--from", first, "--to", last, "--wait", "10s")
	if err != nil || !strings.Contains(out, "3 runs (overlap allow_all") || !strings.Contains(out, "waits for its data (latest start 03:00)") {
		t.Fatalf("backfill: %v\n%s", err, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	byDate := map[string]runs.RunInfo{}
	list := func() {
		l, err := runs.List(ctx, tclient, runs.ListOptions{Pipeline: name, Namespace: server.Namespace()})
		if err != nil {
			return
		}
		byDate = map[string]runs.RunInfo{}
		for _, r := range l {
			if _, dup := byDate[r.LogicalDate]; dup {
				t.Errorf("two runs for %s: %s and %s", r.LogicalDate, byDate[r.LogicalDate].ID, r.ID)
			}
			byDate[r.LogicalDate] = r
		}
	}
	// The first date's data is there: its run goes on; the others wait.
	waitFor(t, time.Minute, func() bool {
		list()
		return byDate[first].Status == runs.StatusSucceeded &&
			byDate[missing].Status == runs.StatusWaiting && byDate[last].Status == runs.StatusWaiting
	})
	landed[last] = land(last)
	if _, err := runs.Wait(ctx, tclient, byDate[last].ID, nil); err != nil {
		t.Fatal(err)
	}
	list()
	out, _ = e.cli(t, "runs", "list", "--pipeline", name)
	if !strings.Contains(out, "WAITING") {
		t.Errorf("runs list shows no WAITING run:\n%s", out)
	}
	for _, date := range []string{first, last} {
		r := byDate[date]
		res, err := runs.Wait(ctx, tclient, r.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, res, runs.StatusSucceeded)
		work := node(t, res, "work")
		if work.StartedAt.Before(landed[date]) {
			t.Errorf("%s: work started at %s, before its data landed at %s", date, work.StartedAt, landed[date])
		}
		// One run per date, fired at the date's start, for the cron time.
		if want := name + "-nightly-ready-" + date + "T00:00:00Z"; r.ID != want {
			t.Errorf("%s: run id %s, want %s", date, r.ID, want)
		}
		if got, want := strings.TrimSpace(fmt.Sprint(work.Outputs["stdout"])), date+" "+date+"T03:00:00Z"; got != want {
			t.Errorf("%s: work echoed %q, want %q", date, got, want)
		}
		t.Logf("%s: run %s %s; data landed %s, work started %s", date, res.ID, res.Status,
			landed[date].Format(time.TimeOnly+".000"), work.StartedAt.Format(time.TimeOnly+".000"))
	}
	w := byDate[missing]
	t.Logf("%s: run %s %s: %s", missing, w.ID, w.Status, w.Waiting)
	if w.Status != runs.StatusWaiting || !strings.Contains(w.Waiting, "no files match "+dir+"/"+missing+"/*.csv") ||
		!strings.Contains(w.Waiting, "[files "+dir+"/"+missing+"/*.csv") {
		t.Errorf("%s: %s, waiting %q", missing, w.Status, w.Waiting)
	}
	out, _ = e.cli(t, "status", w.ID)
	if !strings.Contains(out, "WAITING") || !strings.Contains(out, "waiting for data: no files match "+dir+"/"+missing+"/*.csv") {
		t.Errorf("status of %s:\n%s", w.ID, out)
	}
	st, err := runs.State(ctx, tclient, w.ID)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.Node("work"); n.Status != runs.NodePending {
		t.Errorf("%s: work %s while its run waits", missing, n.Status)
	}
}

// TestWhenReadyRunStartsBeforeCronTime triggers a when_ready schedule
// whose cron time (23:59 UTC) is hours away: the run waits for today's
// files with its deadline counted from 23:59, and runs its node as soon
// as they land, long before 23:59, for 23:59 (its logical time).
func TestWhenReadyRunStartsBeforeCronTime(t *testing.T) {
	parallel(t)
	now := time.Now().UTC()
	today := now.Truncate(24 * time.Hour)
	latest := today.Add(23*time.Hour + 59*time.Minute)
	if latest.Sub(now) < 5*time.Minute {
		t.Skipf("%s: too close to the 23:59 cron time for this test", now.Format(time.TimeOnly))
	}
	name, dir := "it-when-ready-early", t.TempDir()
	spec := fmt.Sprintf(`name: %s
wait_for:
  - {files: "%s/${run.logical_date}/*.csv", deadline: 2m, poll: 1s}
schedules:
  - id: before-midnight
    cron: "59 23 * * *"
    when_ready: true
    paused: true
nodes:
  - {id: work, type: command, with: {argv: [echo, "${run.logical_time}"]}}
`, name, dir)
	e := newSchedEnv(t, map[string]string{name: spec})
	if _, err := e.cli(t, "schedule", "apply", e.dir, "--task-queue", e.queue); err != nil {
		t.Fatal(err)
	}
	id := name + "/before-midnight"
	if out, err := e.cli(t, "schedule", "describe", id); err != nil ||
		!strings.Contains(out, "each date's run starts at 00:00 (cron 0 0 * * *) and waits for its data; 23:59 is its latest start") {
		t.Fatalf("describe: %v\n%s", err, out)
	}
	if _, err := e.cli(t, "schedule", "trigger", id); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var run runs.RunInfo
	waitFor(t, 30*time.Second, func() bool {
		l, err := runs.List(ctx, tclient, runs.ListOptions{Pipeline: name, Namespace: server.Namespace()})
		if err != nil || len(l) != 1 || l[0].Status != runs.StatusWaiting {
			return false
		}
		run = l[0]
		return true
	})
	st, err := runs.State(ctx, tclient, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The deadline counts from the cron time, not from the early start.
	if len(st.Waiting) != 1 || !st.Waiting[0].Deadline.Equal(latest.Add(2*time.Minute)) {
		t.Fatalf("waiting %+v, want a deadline at %s", st.Waiting, latest.Add(2*time.Minute))
	}
	t.Logf("run %s for %s: %s", run.ID, run.LogicalDate, st.Waiting[0].Text(time.Now()))
	landed := time.Now() // before the write: the run may see the file before it returns
	day := filepath.Join(dir, today.Format(time.DateOnly))
	if err := os.MkdirAll(day, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(day, "part-0.csv"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := runs.Wait(ctx, tclient, run.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, runs.StatusSucceeded)
	work := node(t, res, "work")
	if work.StartedAt.Before(landed) || !work.StartedAt.Before(latest) {
		t.Errorf("work started at %s; want after the files landed (%s) and before the 23:59 cron time", work.StartedAt, landed)
	}
	if got, want := strings.TrimSpace(fmt.Sprint(work.Outputs["stdout"])), latest.Format(time.RFC3339); got != want {
		t.Errorf("logical time %q, want the cron time %s", got, want)
	}
	t.Logf("files landed %s, work started %s (%s later), logical time %s", landed.Format(time.TimeOnly+".000"),
		work.StartedAt.Format(time.TimeOnly+".000"), work.StartedAt.Sub(landed).Round(time.Millisecond), work.Outputs["stdout"])
}
