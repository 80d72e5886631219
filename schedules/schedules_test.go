package schedules

import (
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/runs"
)

func parse(t *testing.T, src string) *dags.Spec {
	t.Helper()
	s, err := dags.Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(nil); err != nil {
		t.Fatal(err)
	}
	return s
}

const spec = `name: p
params:
  start_date: {type: string, default: "2026-01-01"}
schedules:
  - id: daily
    cron: "0 3 * * *"
    timezone: Europe/Paris
    params: {start_date: "2026-02-01"}
    catchup_window: 2h
    overlap: allow_all
    pause_on_failure: true
    jitter: 1m
  - id: often
    every: 90m
    paused: true
nodes:
  - id: a
    type: noop
`

func TestBuild(t *testing.T) {
	s := parse(t, spec)
	o, err := Build(s.Name, s.Schedule("daily"), BuildOptions{TaskQueue: "q", File: "p.yaml", WithScheduleAttr: true})
	if err != nil {
		t.Fatal(err)
	}
	if o.ID != "retrain/p/daily" || o.Overlap != enumspb.SCHEDULE_OVERLAP_POLICY_ALLOW_ALL || o.CatchupWindow != 2*time.Hour ||
		!o.PauseOnFailure || o.Paused || o.Spec.TimeZoneName != "Europe/Paris" || o.Spec.Jitter != time.Minute ||
		len(o.Spec.CronExpressions) != 1 || o.Spec.CronExpressions[0] != "0 3 * * *" || len(o.Spec.Intervals) != 0 {
		t.Errorf("options: %+v", o)
	}
	a := o.Action.(*client.ScheduleWorkflowAction)
	if a.Workflow != runs.PipelineWorkflow || a.TaskQueue != "q" || a.ID != "p-daily" {
		t.Errorf("action: %+v", a)
	}
	in := a.Args[0].(runs.PipelineInput)
	if in.Pipeline != "p" || in.Schedule != "daily" || in.Timezone != "Europe/Paris" || in.Params["start_date"] != "2026-02-01" || len(in.Spec) != 0 {
		t.Errorf("input: %+v", in)
	}
	if v, ok := a.TypedSearchAttributes.GetKeyword(runs.PipelineKey); !ok || v != "p" {
		t.Errorf("pipeline attribute %q %v", v, ok)
	}
	if !hasAttr(a, ScheduleAttr) {
		t.Error("no schedule attribute")
	}
	rec := a.Memo[MemoKey].(Record)
	if rec.Pipeline != "p" || rec.ID != "daily" || rec.Overlap != "allow_all" || rec.CatchupWindow != "2h0m0s" || rec.File != "p.yaml" {
		t.Errorf("record: %+v", rec)
	}

	o, err = Build(s.Name, s.Schedule("often"), BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a = o.Action.(*client.ScheduleWorkflowAction)
	if len(o.Spec.Intervals) != 1 || o.Spec.Intervals[0].Every != 90*time.Minute || !o.Paused ||
		o.Overlap != enumspb.SCHEDULE_OVERLAP_POLICY_SKIP || o.CatchupWindow != 0 || a.TaskQueue != runs.DefaultTaskQueue || hasAttr(a, ScheduleAttr) {
		t.Errorf("often: %+v", o)
	}
}

func TestRecordDiff(t *testing.T) {
	s := parse(t, spec)
	base := NewRecord("p", s.Schedule("daily"), "q", "a.yaml")
	moved := base
	moved.File = "b.yaml"
	moved.Params = map[string]any{"start_date": "2026-02-01"}
	if d := recordDiff(base, moved); d != nil {
		t.Errorf("moved file: %v", d)
	}
	changed := base
	changed.Cron, changed.Params, changed.Paused = "0 4 * * *", map[string]any{"start_date": "x"}, true
	if d := recordDiff(base, changed); len(d) != 3 || d[0] != "cron" || d[1] != "params" || d[2] != "paused" {
		t.Errorf("diff %v", d)
	}
	// Numbers from JSON (float64) equal those from YAML (int).
	a, b := Record{Params: map[string]any{"n": 3}}, Record{Params: map[string]any{"n": 3.0}}
	if !a.same(b) {
		t.Error("3 != 3.0")
	}
}

func TestIDs(t *testing.T) {
	if p, s, ok := Split(ID("ctr-retrain", "daily")); !ok || p != "ctr-retrain" || s != "daily" {
		t.Errorf("split %q %q %v", p, s, ok)
	}
	for _, id := range []string{"daily", "other/p/daily", "retrain/p", "retrain//x"} {
		if _, _, ok := Split(id); ok {
			t.Errorf("Split(%q) ok", id)
		}
	}
	for name, want := range map[string]enumspb.ScheduleOverlapPolicy{"": enumspb.SCHEDULE_OVERLAP_POLICY_SKIP, "buffer_all": enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ALL} {
		if got, err := Overlap(name); err != nil || got != want {
			t.Errorf("Overlap(%q) = %v, %v", name, got, err)
		}
	}
	for _, name := range dags.Overlaps {
		p, _ := Overlap(name)
		if OverlapName(p) != name {
			t.Errorf("OverlapName(%v) = %s", p, OverlapName(p))
		}
	}
}

func TestDates(t *testing.T) {
	d, err := Dates("2026-02-27", "2026-03-02")
	if err != nil || len(d) != 4 || d[0] != "2026-02-27" || d[3] != "2026-03-02" {
		t.Errorf("%v %v", d, err)
	}
	for _, c := range [][2]string{{"2026-03-02", "2026-03-01"}, {"x", "2026-01-01"}, {"2026-01-01", "2026-13-01"}, {"2000-01-01", "2026-01-01"}} {
		if _, err := Dates(c[0], c[1]); err == nil {
			t.Errorf("Dates(%s, %s): no error", c[0], c[1])
		}
	}
}

const readySpec = `name: p
wait_for:
  - {files: "/data/${run.logical_date}/*.csv", deadline: 6h}
schedules:
  - id: daily
    cron: "0 3 * * *"
    timezone: Europe/Paris
    when_ready: true
  - id: late
    cron: "30 2 * * mon-fri"
    when_ready: true
    earliest: "01:00"
    overlap: buffer_one
nodes:
  - id: a
    type: noop
`

// A when_ready schedule fires at earliest on its dates and tells its runs
// the cron's time, their latest start.
func TestBuildWhenReady(t *testing.T) {
	s := parse(t, readySpec)
	o, err := Build(s.Name, s.Schedule("daily"), BuildOptions{TaskQueue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Spec.CronExpressions) != 1 || o.Spec.CronExpressions[0] != "0 0 * * *" || o.Overlap != enumspb.SCHEDULE_OVERLAP_POLICY_ALLOW_ALL {
		t.Errorf("daily: cron %v overlap %v", o.Spec.CronExpressions, o.Overlap)
	}
	a := o.Action.(*client.ScheduleWorkflowAction)
	in := a.Args[0].(runs.PipelineInput)
	if in.LatestStart != "03:00" || in.Timezone != "Europe/Paris" || in.Schedule != "daily" || a.ID != "p-daily" {
		t.Errorf("input %+v, workflow id %s", in, a.ID)
	}
	rec := a.Memo[MemoKey].(Record)
	if !rec.WhenReady || rec.Earliest != "00:00" || rec.Cron != "0 3 * * *" || rec.Overlap != "allow_all" {
		t.Errorf("record %+v", rec)
	}
	if f := fires(rec); f != "cron 0 3 * * * Europe/Paris, when ready from 00:00" {
		t.Errorf("fires %q", f)
	}

	o, err = Build(s.Name, s.Schedule("late"), BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	in = o.Action.(*client.ScheduleWorkflowAction).Args[0].(runs.PipelineInput)
	if o.Spec.CronExpressions[0] != "0 1 * * mon-fri" || in.LatestStart != "02:30" || o.Overlap != enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ONE {
		t.Errorf("late: cron %v latest %q overlap %v", o.Spec.CronExpressions, in.LatestStart, o.Overlap)
	}

	// A plain schedule's runs get no latest start.
	plain := parse(t, spec)
	o, _ = Build(plain.Name, plain.Schedule("daily"), BuildOptions{})
	if in := o.Action.(*client.ScheduleWorkflowAction).Args[0].(runs.PipelineInput); in.LatestStart != "" {
		t.Errorf("plain schedule: latest start %q", in.LatestStart)
	}

	// Turning when_ready on or moving earliest updates the schedule.
	base := NewRecord("p", plain.Schedule("daily"), "q", "")
	ready := base
	ready.WhenReady, ready.Earliest = true, "00:00"
	if d := recordDiff(base, ready); len(d) != 2 || d[0] != "when_ready" || d[1] != "earliest" {
		t.Errorf("diff %v", d)
	}
}
