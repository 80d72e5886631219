package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/schedules"
	"github.com/retrain-ml/retrain/worker"
)

// schedPipeline is a tiny pipeline for schedule tests: it sleeps, fails if
// asked, and echoes its date param and, where the expression language has
// run values, its logical date. Its schedules come from the test.
func schedPipeline(name, schedulesYAML string) string {
	echo := `"${params.date}"`
	if runValues() {
		echo = `"${params.date} ${run.logical_date}"`
	}
	return fmt.Sprintf(`name: %s
params:
  date: {type: string, default: "none"}
  sleep: {type: string, default: "0"}
  fail: {type: bool, default: false}
defaults:
  retry: {max_attempts: 1}
  timeout: 5m
schedules:
%s
nodes:
  - id: work
    type: command
    with: {argv: ["sh", "-c", "sleep \"$1\"; test \"$2\" != true && echo \"$3\"", "sh", "${params.sleep}", "${params.fail}", %s]}
`, name, schedulesYAML, echo)
}

// runValues reports whether specs may use ${run.logical_date} (the run
// values; a release without them refuses such specs).
func runValues() bool {
	s, err := dags.Parse("probe.yaml", []byte("name: probe\nnodes:\n  - id: a\n    type: command\n    with: {argv: [echo, \"${run.logical_date}\"]}\n"))
	return err == nil && s.Validate(worker.Types()) == nil
}

// schedEnv is a folder of pipeline specs, a worker that runs them by name
// on its own queue, and the schedules the test made, deleted at the end.
type schedEnv struct {
	dir, queue string
}

func newSchedEnv(t *testing.T, specs map[string]string) *schedEnv {
	t.Helper()
	e := &schedEnv{dir: t.TempDir(), queue: newQueue(t)}
	for name, src := range specs {
		e.write(t, name, src)
	}
	startWorkerWith(t, worker.Config{TaskQueue: e.queue, PipelinesDir: e.dir})
	t.Cleanup(func() {
		ctx := context.Background()
		for name := range specs {
			ids, _ := schedules.ListIDs(ctx, tclient)
			for _, id := range ids {
				if p, _, _ := schedules.Split(id); p == name {
					h := tclient.ScheduleClient().GetHandle(ctx, id)
					if d, err := h.Describe(ctx); err == nil {
						for _, r := range d.Info.RunningWorkflows {
							_ = tclient.TerminateWorkflow(ctx, r.WorkflowID, "", "test over")
						}
					}
					_ = h.Delete(ctx)
				}
			}
		}
	})
	return e
}

func (e *schedEnv) write(t *testing.T, name, src string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(e.dir, name+".yaml"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}

// cli runs the retrain command line against the test server.
func (e *schedEnv) cli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := cli.NewRoot(&cli.App{Out: &out, Err: &errOut, LogLevel: "warn"}, "retrain")
	root.SetArgs(append(args, "--address", server.FrontendAddress(), "--namespace", server.Namespace()))
	err := root.ExecuteContext(context.Background())
	t.Logf("$ retrain %s\n%s%s", strings.Join(args, " "), out.String(), errOut.String())
	return out.String(), err
}

// describe waits until cond holds of the schedule's description.
func describeUntil(t *testing.T, id string, limit time.Duration, what string, cond func(*client.ScheduleDescription) bool) *client.ScheduleDescription {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(limit)
	for {
		d, err := tclient.ScheduleClient().GetHandle(ctx, id).Describe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if cond(d) {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("schedule %s: %s did not happen in %s: info %+v state %+v", id, what, limit, d.Info, d.Schedule.State)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestScheduleApplyTwice is not parallel: its `apply --prune` deletes every
// retrain schedule its folder does not declare, whatever the pipeline, so
// it would delete the schedules of the tests running beside it.
func TestScheduleApplyTwice(t *testing.T) {
	name := "it-sched-apply"
	e := newSchedEnv(t, map[string]string{name: schedPipeline(name, `  - id: daily
    cron: "0 3 * * *"
    timezone: Europe/Paris
    params: {date: "2026-01-01"}
    overlap: buffer_one
  - id: hourly
    every: 1h
    paused: true`)})
	queue := []string{"--task-queue", e.queue}

	out, err := e.cli(t, append([]string{"schedule", "apply", e.dir, "--dry-run"}, queue...)...)
	if err != nil || !strings.Contains(out, "retrain/"+name+"/daily would create") || !strings.Contains(out, "2 to be created") {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	if ids, _ := schedules.ListIDs(context.Background(), tclient); slices.Contains(ids, schedules.ID(name, "daily")) {
		t.Fatal("the dry run created a schedule")
	}
	out, err = e.cli(t, append([]string{"schedule", "apply", e.dir}, queue...)...)
	if err != nil || !strings.Contains(out, "retrain/"+name+"/daily created (cron 0 3 * * * Europe/Paris)") || !strings.Contains(out, "2 created") {
		t.Fatalf("first apply: %v\n%s", err, out)
	}
	out, err = e.cli(t, append([]string{"schedule", "apply", e.dir}, queue...)...)
	if err != nil || !strings.Contains(out, "no change (2 unchanged)") || strings.Contains(out, "created") || strings.Contains(out, "updated") {
		t.Fatalf("second apply: %v\n%s", err, out)
	}

	// The schedule is what the spec says, and starts Pipeline by name.
	d := describeUntil(t, schedules.ID(name, "daily"), 10*time.Second, "describe", func(*client.ScheduleDescription) bool { return true })
	a := d.Schedule.Action.(*client.ScheduleWorkflowAction)
	if a.Workflow != runs.PipelineWorkflow || a.TaskQueue != e.queue || d.Schedule.Spec.TimeZoneName != "Europe/Paris" ||
		schedules.OverlapName(d.Schedule.Policy.Overlap) != "buffer_one" {
		t.Errorf("schedule: action %+v spec %+v policy %+v", a, d.Schedule.Spec, d.Schedule.Policy)
	}
	if rec, ok := schedules.RecordOf(d); !ok || rec.Params["date"] != "2026-01-01" || rec.Pipeline != name {
		t.Errorf("record %+v %v", rec, ok)
	}

	// A changed spec updates only the schedule that changed; --prune
	// deletes the one no spec declares any more.
	e.write(t, name, schedPipeline(name, `  - id: daily
    cron: "0 4 * * *"
    timezone: Europe/Paris
    params: {date: "2026-01-01"}
    overlap: buffer_one`))
	out, err = e.cli(t, append([]string{"schedule", "apply", e.dir, "--prune"}, queue...)...)
	if err != nil || !strings.Contains(out, "retrain/"+name+"/daily updated (cron)") || !strings.Contains(out, "retrain/"+name+"/hourly deleted") {
		t.Fatalf("apply after a change: %v\n%s", err, out)
	}
	out, err = e.cli(t, append([]string{"schedule", "apply", e.dir, "--prune"}, queue...)...)
	if err != nil || !strings.Contains(out, "no change (1 unchanged)") {
		t.Fatalf("apply again: %v\n%s", err, out)
	}
	if out, err = e.cli(t, "schedule", "describe", name+"/daily"); err != nil || !strings.Contains(out, "fires     cron 0 4 * * * in Europe/Paris") {
		t.Errorf("describe: %v\n%s", err, out)
	}
	if out, err = e.cli(t, "schedule", "pause", "retrain/"+name+"/daily"); err != nil || !strings.Contains(out, "paused") {
		t.Errorf("pause: %v\n%s", err, out)
	}
	// Paused by hand, unchanged in the spec: apply leaves it paused.
	if out, _ = e.cli(t, append([]string{"schedule", "apply", e.dir}, queue...)...); !strings.Contains(out, "no change") {
		t.Errorf("apply after pause:\n%s", out)
	}
	describeUntil(t, schedules.ID(name, "daily"), 5*time.Second, "stay paused", func(d *client.ScheduleDescription) bool { return d.Schedule.State.Paused })
}

// scheduledRuns waits for n actions of a schedule, then for each run to
// end, and returns the results by nominal time.
func scheduledRuns(t *testing.T, id string, n int, limit time.Duration) ([]time.Time, []*runs.Result) {
	t.Helper()
	d := describeUntil(t, id, limit, fmt.Sprintf("%d actions", n), func(d *client.ScheduleDescription) bool { return len(d.Info.RecentActions) >= n })
	acts := d.Info.RecentActions
	slices.SortFunc(acts, func(a, b client.ScheduleActionResult) int { return a.ScheduleTime.Compare(b.ScheduleTime) })
	var times []time.Time
	var results []*runs.Result
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for _, a := range acts {
		res, err := runs.Wait(ctx, tclient, a.StartWorkflowResult.WorkflowID, nil)
		if err != nil {
			t.Fatal(err)
		}
		times = append(times, a.ScheduleTime)
		results = append(results, res)
	}
	return times, results
}

func TestScheduleBackfillThreeDays(t *testing.T) {
	parallel(t)
	name := "it-sched-backfill"
	e := newSchedEnv(t, map[string]string{name: schedPipeline(name, `  - id: daily
    cron: "0 3 * * *"
    overlap: allow_all
    paused: true`)})
	if _, err := e.cli(t, "schedule", "apply", e.dir, "--task-queue", e.queue); err != nil {
		t.Fatal(err)
	}
	today := time.Now().UTC().Truncate(24 * time.Hour)
	from, to := today.AddDate(0, 0, -3).Format(time.DateOnly), today.AddDate(0, 0, -1).Format(time.DateOnly)
	out, err := e.cli(t, "schedule", "backfill", "daily", "--from", from, "--to", to)
	// Backfills run every date whatever the schedule's policy: buffer_all.
	if err != nil || !strings.Contains(out, "3 runs (overlap buffer_all") {
		t.Fatalf("backfill: %v\n%s", err, out)
	}
	times, results := scheduledRuns(t, schedules.ID(name, "daily"), 3, 2*time.Minute)
	if len(times) != 3 {
		t.Fatalf("%d runs, want 3", len(times))
	}
	for i, tm := range times {
		want := today.AddDate(0, 0, i-3).Add(3 * time.Hour)
		if !tm.Equal(want) {
			t.Errorf("action %d at %s, want %s", i, tm, want)
		}
		wantStatus(t, results[i], runs.StatusSucceeded)
		out := strings.TrimSpace(fmt.Sprint(node(t, results[i], "work").Outputs["stdout"]))
		t.Logf("run %s (nominal %s): stdout %q", results[i].ID, tm.Format(time.RFC3339), out)
		if runValues() && !strings.HasSuffix(out, want.Format(time.DateOnly)) {
			t.Errorf("run %s echoed %q, want its logical date %s", results[i].ID, out, want.Format(time.DateOnly))
		}
	}
	// The runs carry Temporal's record of their nominal time: the logical
	// time, whoever computes it.
	for i, res := range results {
		desc, err := tclient.DescribeWorkflowExecution(context.Background(), res.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		p := desc.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()["TemporalScheduledStartTime"]
		var at time.Time
		if p == nil || converter.GetDefaultDataConverter().FromPayload(p, &at) != nil || !at.Equal(times[i]) {
			t.Errorf("run %s: TemporalScheduledStartTime %v, want %s", res.ID, at, times[i])
		}
	}
}

func TestBackfillPipelineDates(t *testing.T) {
	parallel(t)
	name := "it-backfill-dates"
	e := newSchedEnv(t, map[string]string{name: schedPipeline(name, "  []")})
	out, err := e.cli(t, "backfill", name, "--from", "2026-10-30", "--to", "2026-11-01", "--max-parallel", "2", "-p", "date=fixed", "--task-queue", e.queue)
	if err != nil {
		t.Fatalf("backfill: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(lines), out)
	}
	seen := map[string]bool{}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 3 || f[1] != "succeeded" {
			t.Fatalf("line %q", l)
		}
		seen[f[0]] = true
		in := runInput(t, f[2])
		if in.LogicalDate != f[0] || in.Pipeline != name || in.Params["date"] != "fixed" {
			t.Errorf("run %s input %+v, want logical date %s", f[2], in, f[0])
		}
		res, err := runs.State(context.Background(), tclient, f[2])
		if err != nil {
			t.Fatal(err)
		}
		if stdout := strings.TrimSpace(fmt.Sprint(node(t, res, "work").Outputs["stdout"])); runValues() && stdout != "fixed "+f[0] {
			t.Errorf("run %s echoed %q", f[2], stdout)
		}
	}
	if len(seen) != 3 || !seen["2026-10-30"] || !seen["2026-10-31"] || !seen["2026-11-01"] {
		t.Errorf("dates %v", seen)
	}
}

// runInput reads the input a run was started with.
func runInput(t *testing.T, id string) runs.PipelineInput {
	t.Helper()
	it := tclient.GetWorkflowHistory(context.Background(), id, "", false, 0)
	ev, err := it.Next()
	if err != nil {
		t.Fatal(err)
	}
	var in runs.PipelineInput
	p := ev.GetWorkflowExecutionStartedEventAttributes().GetInput().GetPayloads()
	if len(p) != 1 || converter.GetDefaultDataConverter().FromPayload(p[0], &in) != nil {
		t.Fatalf("run %s: no input", id)
	}
	return in
}

func TestScheduleOverlapSkipVsAllowAll(t *testing.T) {
	parallel(t)
	name := "it-sched-overlap"
	e := newSchedEnv(t, map[string]string{name: schedPipeline(name, `  - id: skip
    cron: "0 0 1 1 *"
    params: {sleep: "60"}
    overlap: skip
    paused: true
  - id: all
    cron: "0 0 1 1 *"
    params: {sleep: "60"}
    overlap: allow_all
    paused: true`)})
	if _, err := e.cli(t, "schedule", "apply", e.dir, "--task-queue", e.queue); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"skip", "all"} {
		full := schedules.ID(name, id)
		if _, err := e.cli(t, "schedule", "trigger", full); err != nil {
			t.Fatal(err)
		}
		describeUntil(t, full, 30*time.Second, "first run", func(d *client.ScheduleDescription) bool { return d.Info.NumActions == 1 })
		// A second apart: the run's id ends in its nominal second.
		time.Sleep(1100 * time.Millisecond)
		if _, err := e.cli(t, "schedule", "trigger", full); err != nil {
			t.Fatal(err)
		}
	}
	skip := describeUntil(t, schedules.ID(name, "skip"), 30*time.Second, "a skipped action", func(d *client.ScheduleDescription) bool { return d.Info.NumActionsSkippedOverlap == 1 })
	if n := len(skip.Info.RunningWorkflows); n != 1 || skip.Info.NumActions != 1 {
		t.Errorf("skip: %d running, %d actions; want 1 and 1", n, skip.Info.NumActions)
	}
	// allow_all does not watch its runs (RunningWorkflows stays empty):
	// ask each run instead.
	all := describeUntil(t, schedules.ID(name, "all"), 30*time.Second, "two actions", func(d *client.ScheduleDescription) bool { return d.Info.NumActions == 2 })
	running := 0
	for _, a := range all.Info.RecentActions {
		desc, err := tclient.DescribeWorkflowExecution(context.Background(), a.StartWorkflowResult.WorkflowID, "")
		if err != nil {
			t.Fatal(err)
		}
		if desc.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			running++
			t.Cleanup(func() {
				_ = tclient.TerminateWorkflow(context.Background(), a.StartWorkflowResult.WorkflowID, "", "test over")
			})
		}
	}
	if running != 2 || all.Info.NumActionsSkippedOverlap != 0 {
		t.Errorf("allow_all: %d runs running, %d skipped; want 2 and 0", running, all.Info.NumActionsSkippedOverlap)
	}
	t.Logf("skip: %d actions, %d skipped, %d running; allow_all: %d actions, %d skipped, %d running",
		skip.Info.NumActions, skip.Info.NumActionsSkippedOverlap, len(skip.Info.RunningWorkflows),
		all.Info.NumActions, all.Info.NumActionsSkippedOverlap, running)
}

func TestSchedulePauseOnFailure(t *testing.T) {
	parallel(t)
	name := "it-sched-pause"
	e := newSchedEnv(t, map[string]string{name: schedPipeline(name, `  - id: nightly
    cron: "0 0 1 1 *"
    params: {fail: true}
    pause_on_failure: true`)})
	if _, err := e.cli(t, "schedule", "apply", e.dir, "--task-queue", e.queue); err != nil {
		t.Fatal(err)
	}
	id := schedules.ID(name, "nightly")
	if _, err := e.cli(t, "schedule", "trigger", "nightly"); err != nil {
		t.Fatal(err)
	}
	_, results := scheduledRuns(t, id, 1, time.Minute)
	wantStatus(t, results[0], runs.StatusFailed)
	d := describeUntil(t, id, 30*time.Second, "pause after the failure", func(d *client.ScheduleDescription) bool { return d.Schedule.State.Paused })
	t.Logf("paused after run %s failed: note %q", results[0].ID, d.Schedule.State.Note)
	// The list reads visibility, which may lag a moment.
	for i := 0; ; i++ {
		out, _ := e.cli(t, "schedule", "list")
		if strings.Contains(out, id) {
			break
		}
		if i == 20 {
			t.Fatalf("list does not show %s:\n%s", id, out)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
