package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/schedules"
)

// dstBackfill applies a nightly cron in tz, backfills from..to with the
// extra flags, and checks one run per date, each with that date as its
// logical date, at the wanted local times.
func dstBackfill(t *testing.T, name, cron, tz, from, to string, flags []string, wantLocal []string) {
	t.Helper()
	e := newSchedEnv(t, map[string]string{name: schedPipeline(name, fmt.Sprintf(`  - id: nightly
    cron: %q
    timezone: %s
    paused: true`, cron, tz))})
	if _, err := e.cli(t, "schedule", "apply", e.dir, "--task-queue", e.queue); err != nil {
		t.Fatal(err)
	}
	out, err := e.cli(t, append([]string{"schedule", "backfill", name + "/nightly", "--from", from, "--to", to}, flags...)...)
	if err != nil {
		t.Fatalf("backfill: %v\n%s", err, out)
	}
	loc, _ := time.LoadLocation(tz)
	if !strings.Contains(out, fmt.Sprintf("%d runs", len(wantLocal))) || !strings.Contains(out, "runs started") {
		t.Errorf("backfill output:\n%s", out)
	}
	for _, w := range wantLocal {
		if date, at, _ := strings.Cut(w, " "); !strings.Contains(out, "  "+date+"  "+at) {
			t.Errorf("backfill output lacks %s %s:\n%s", date, at, out)
		}
	}
	times, results := scheduledRuns(t, schedules.ID(name, "nightly"), len(wantLocal), 3*time.Minute)
	if len(times) != len(wantLocal) {
		t.Fatalf("%d runs, want %d", len(times), len(wantLocal))
	}
	for i, tm := range times {
		got := tm.In(loc).Format("2006-01-02 15:04 MST")
		date := strings.Fields(wantLocal[i])[0]
		wantStatus(t, results[i], runs.StatusSucceeded)
		stdout := strings.TrimSpace(fmt.Sprint(node(t, results[i], "work").Outputs["stdout"]))
		t.Logf("run %s: nominal %s, logical date %s, echoed %q", results[i].ID, got, results[i].LogicalDate, stdout)
		if got != wantLocal[i] || results[i].LogicalDate != date || (runValues() && !strings.HasSuffix(stdout, date)) {
			t.Errorf("run %d: nominal %s logical date %s echoed %q, want %s", i, got, results[i].LogicalDate, stdout, wantLocal[i])
		}
	}
}

// The four days in Berlin: 02:00 does not exist on 2026-03-29,
// and that day still runs, once, at 03:00 CEST, as 2026-03-29; the
// schedule's overlap (skip) does not drop the other dates.
func TestScheduleDSTBackfillBerlin(t *testing.T) {
	dstBackfill(t, "it-sched-dst-berlin", "0 2 * * *", "Europe/Berlin", "2026-03-27", "2026-03-30", nil, []string{
		"2026-03-27 02:00 CET", "2026-03-28 02:00 CET", "2026-03-29 03:00 CEST", "2026-03-30 02:00 CEST"})
}

func TestScheduleDSTBackfillBerlinFallBack(t *testing.T) {
	dstBackfill(t, "it-sched-dst-berlin-fall", "0 2 * * *", "Europe/Berlin", "2026-10-24", "2026-10-26", nil, []string{
		"2026-10-24 02:00 CEST", "2026-10-25 02:00 CET", "2026-10-26 02:00 CET"})
}

func TestScheduleDSTBackfillNewYork(t *testing.T) {
	dstBackfill(t, "it-sched-dst-ny", "0 2 * * *", "America/New_York", "2026-03-07", "2026-03-09", []string{"--max-parallel", "3"}, []string{
		"2026-03-07 02:00 EST", "2026-03-08 03:00 EDT", "2026-03-09 02:00 EDT"})
}

// 01:00 occurs twice in New York on 2026-11-01: one run, after the
// repeated hour; two at once at most (the dates go one action at a time).
func TestScheduleDSTBackfillNewYorkFallBack(t *testing.T) {
	dstBackfill(t, "it-sched-dst-ny-fall", "0 1 * * *", "America/New_York", "2026-10-31", "2026-11-02", []string{"--max-parallel", "2"}, []string{
		"2026-10-31 01:00 EDT", "2026-11-01 02:00 EST", "2026-11-02 01:00 EST"})
}

// apply's schedules carry the daylight-saving entries; describe shows the
// next actions in local time; a pause note names who paused.
func TestScheduleDSTDescribeAndPauseNote(t *testing.T) {
	name := "it-sched-dst-describe"
	e := newSchedEnv(t, map[string]string{name: schedPipeline(name, `  - id: nightly
    cron: "0 2 * * *"
    timezone: Europe/Berlin`)})
	if _, err := e.cli(t, "schedule", "apply", e.dir, "--task-queue", e.queue); err != nil {
		t.Fatal(err)
	}
	id := schedules.ID(name, "nightly")
	d := describeUntil(t, id, 10*time.Second, "describe", func(*client.ScheduleDescription) bool { return true })
	if n := len(d.Schedule.Spec.Calendars); n == 0 {
		t.Errorf("no daylight-saving calendar entries: %+v", d.Schedule.Spec)
	}
	out, err := e.cli(t, "schedule", "describe", id)
	if err != nil || !strings.Contains(out, "next      ") || !(strings.Contains(out, " CET (") || strings.Contains(out, " CEST (")) ||
		!strings.Contains(out, "dst       ") {
		t.Errorf("describe: %v\n%s", err, out)
	}
	t.Setenv("RETRAIN_USER", "alice")
	if _, err := e.cli(t, "schedule", "pause", id, "--note", "lake migration"); err != nil {
		t.Fatal(err)
	}
	out, _ = e.cli(t, "schedule", "describe", id)
	if !strings.Contains(out, "paused    true (lake migration (paused by alice via retrain CLI ") {
		t.Errorf("describe after pause:\n%s", out)
	}
	for i := 0; ; i++ {
		out, _ = e.cli(t, "schedule", "list")
		if strings.Contains(out, "lake migration (paused by alice") {
			break
		}
		if i == 20 {
			t.Fatalf("list does not show the note:\n%s", out)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// A scheduled run whose pipeline the worker does not know fails at once;
// `runs list` shows the action's date as its logical date, not the day it
// ran. apply warns about a queue no worker polls.
func TestScheduleUnresolvedRunLogicalDate(t *testing.T) {
	name := "it-sched-unknown"
	e := newSchedEnv(t, map[string]string{"other": schedPipeline("other", "  []")})
	specDir := t.TempDir()
	src := schedPipeline(name, `  - id: nightly
    cron: "0 2 * * *"
    timezone: Europe/Berlin
    paused: true`)
	if err := os.WriteFile(filepath.Join(specDir, name+".yaml"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = tclient.ScheduleClient().GetHandle(context.Background(), schedules.ID(name, "nightly")).Delete(context.Background())
	})
	out, err := e.cli(t, "schedule", "apply", specDir, "--task-queue", e.queue+"-nobody", "--dry-run")
	if err != nil || !strings.Contains(out, `no worker polls task queue "`+e.queue+`-nobody"`) || !strings.Contains(out, "pipeline "+name) {
		t.Errorf("apply to a queue nobody polls: %v\n%s", err, out)
	}
	// The queue's worker is asked (a dry run) and does not know the pipeline.
	out, err = e.cli(t, "schedule", "apply", specDir, "--task-queue", e.queue)
	if err != nil || !strings.Contains(out, `warning: the worker polling task queue "`+e.queue+`" cannot run pipeline `+name+`: pipeline "`+name+`" not found; known pipelines: other`) {
		t.Errorf("apply of a pipeline the worker lacks: %v\n%s", err, out)
	}
	// One it knows: no warning, and the check leaves no run behind.
	knownDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(knownDir, "other.yaml"), []byte(schedPipeline("other", `  - {id: nightly, cron: "0 2 * * *", paused: true}`)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = tclient.ScheduleClient().GetHandle(context.Background(), schedules.ID("other", "nightly")).Delete(context.Background())
	})
	out, err = e.cli(t, "schedule", "apply", knownDir, "--task-queue", e.queue)
	if err != nil || strings.Contains(out, "warning") {
		t.Errorf("apply of a pipeline the worker knows: %v\n%s", err, out)
	}
	// The checks are deleted (the server may still list one that closed
	// as it was deleted), and `runs list` never shows them.
	out, _ = e.cli(t, "runs", "list", "--limit", "100")
	if strings.Contains(out, runs.CheckIDPrefix) {
		t.Errorf("runs list shows a check:\n%s", out)
	}
	if _, err := e.cli(t, "schedule", "backfill", name+"/nightly", "--from", "2026-03-27", "--to", "2026-03-27"); err != nil {
		t.Fatal(err)
	}
	_, results := scheduledRuns(t, schedules.ID(name, "nightly"), 1, time.Minute)
	wantStatus(t, results[0], runs.StatusFailed)
	if results[0].LogicalDate != "2026-03-27" {
		t.Errorf("unresolved run %s: result's logical date %q, want 2026-03-27", results[0].ID, results[0].LogicalDate)
	}
	for i := 0; ; i++ {
		out, _ = e.cli(t, "runs", "list", "--schedule", schedules.ID(name, "nightly"))
		if strings.Contains(out, results[0].ID) {
			for _, l := range strings.Split(out, "\n") {
				if f := strings.Fields(l); len(f) > 3 && f[0] == results[0].ID && f[2] != "2026-03-27" {
					t.Errorf("runs list shows logical date %s, want 2026-03-27:\n%s", f[2], out)
				}
			}
			break
		}
		if i == 40 {
			t.Fatalf("runs list lacks %s:\n%s", results[0].ID, out)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
