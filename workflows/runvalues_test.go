package workflows

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/nodetype"
	"github.com/retrain-ml/retrain/runs"
)

// runValuesSpec outputs the run values, through its step's with block.
const runValuesSpec = `name: daily
nodes:
  - id: a
    type: step
    with:
      id: ${run.id}
      pipeline: ${run.pipeline}
      time: ${run.logical_time}
      date: ${run.logical_date}
      yesterday: ${date_add(run.logical_date, -1)}
      week: ${date_range(date_add(run.logical_date, -2), run.logical_date)}
      path: s3://lake/dt=${date_format(run.logical_time, '%Y%m%d')}/
`

// runWith runs runValuesSpec with in, after setup prepares the test
// environment; attrs says what the namespace has.
func (h *harness) runWith(in runs.PipelineInput, attrs bool, setup func(env *testsuite.TestWorkflowEnvironment)) (*runs.Result, error) {
	env := h.NewTestWorkflowEnvironment()
	reg, err := dags.NewRegistry(stepType)
	if err != nil {
		h.t.Fatal(err)
	}
	Register(env)
	env.RegisterActivityWithOptions((&Resolver{AllowInlineSpecs: true, Registry: reg, SearchAttributes: attrs, RunSearchAttributes: attrs}).Resolve,
		activity.RegisterOptions{Name: runs.ResolveActivity})
	env.RegisterActivityWithOptions(nodetype.Activity(h.step), activity.RegisterOptions{Name: "step"})
	if setup != nil {
		setup(env)
	}
	if in.Spec == nil {
		in.Spec, _ = json.Marshal(runValuesSpec)
	}
	env.ExecuteWorkflow(runs.PipelineWorkflow, in)
	if !env.IsWorkflowCompleted() {
		h.t.Fatal("workflow did not complete")
	}
	env.AssertExpectations(h.t)
	var res runs.Result
	if err := env.GetWorkflowResult(&res); err != nil {
		return nil, err
	}
	return &res, nil
}

func wantOutputs(t *testing.T, res *runs.Result, want map[string]any) {
	t.Helper()
	if res.Status != runs.StatusSucceeded {
		t.Fatalf("status %s: %s", res.Status, res.Error)
	}
	got := res.Node("a").Outputs
	for k, v := range want {
		if g, _ := json.Marshal(got[k]); string(g) != mustJSON(v) {
			t.Errorf("output %s = %s, want %s", k, g, mustJSON(v))
		}
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// A run a Schedule started is for the action's nominal time, whatever the
// input says, in the schedule's time zone; it is labelled with its
// schedule and logical date.
func TestRunValuesScheduledStartTimeWins(t *testing.T) {
	h := newHarness(t)
	nominal := time.Date(2026, 11, 23, 3, 0, 0, 0, time.UTC) // 22:00 the day before in New York
	res, err := h.runWith(runs.PipelineInput{LogicalDate: "2020-01-01", Timezone: "America/New_York"}, true,
		func(env *testsuite.TestWorkflowEnvironment) {
			env.SetStartTime(nominal.Add(90 * time.Minute)) // the worker got to it late
			if err := env.SetTypedSearchAttributesOnStart(temporal.NewSearchAttributes(
				temporal.NewSearchAttributeKeyTime(scheduledStartTimeAttr).ValueSet(nominal),
				temporal.NewSearchAttributeKeyKeyword(scheduledByIDAttr).ValueSet("daily-ctr"),
			)); err != nil {
				t.Fatal(err)
			}
			env.OnUpsertTypedSearchAttributes(mock.Anything).Return(nil).Run(func(args mock.Arguments) {
				sa := args.Get(0).(temporal.SearchAttributes)
				if v, _ := sa.GetKeyword(runs.LogicalDateKey); v != "2026-11-22" {
					t.Errorf("RetrainLogicalDate = %q", v)
				}
				if v, _ := sa.GetKeyword(runs.ScheduleKey); v != "daily-ctr" {
					t.Errorf("RetrainSchedule = %q", v)
				}
				if v, _ := sa.GetKeyword(runs.PipelineKey); v != "daily" {
					t.Errorf("RetrainPipeline = %q", v)
				}
			}).Once()
		})
	if err != nil {
		t.Fatal(err)
	}
	wantOutputs(t, res, map[string]any{
		"pipeline":  "daily",
		"time":      "2026-11-22T22:00:00-05:00",
		"date":      "2026-11-22",
		"yesterday": "2026-11-21",
		"week":      []string{"2026-11-20", "2026-11-21", "2026-11-22"},
		"path":      "s3://lake/dt=20261122/",
	})
	if id := res.Node("a").Outputs["id"]; id != res.ID || id == "" {
		t.Errorf("run.id = %v, want the run id %q", id, res.ID)
	}
	if res.LogicalDate != "2026-11-22" {
		t.Errorf("Result.LogicalDate = %q", res.LogicalDate)
	}
	// The schedule's zone reaches the node: a split's days default to it.
	if z := h.zones["a"]; z != "America/New_York" {
		t.Errorf("the node's input has timezone %q, want the schedule's America/New_York", z)
	}
}

// The input's logical_date: a date, or a time taken in the run's zone.
func TestRunValuesLogicalDateInput(t *testing.T) {
	for _, tc := range []struct {
		in, tz, time, date string
	}{
		{"2026-10-01", "", "2026-10-01T00:00:00Z", "2026-10-01"},
		{"2026-10-01", "Asia/Tokyo", "2026-10-01T00:00:00+09:00", "2026-10-01"},
		{"2026-10-01T23:30:00Z", "Europe/Paris", "2026-10-02T01:30:00+02:00", "2026-10-02"},
		{" 2026-10-01T23:30:00-01:00 ", "", "2026-10-02T00:30:00Z", "2026-10-02"},
	} {
		h := newHarness(t)
		res, err := h.runWith(runs.PipelineInput{LogicalDate: tc.in, Timezone: tc.tz}, false, func(env *testsuite.TestWorkflowEnvironment) {
			env.SetStartTime(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		})
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		wantOutputs(t, res, map[string]any{"time": tc.time, "date": tc.date})
	}
}

// With neither a schedule nor logical_date, a run is for its start time.
func TestRunValuesStartTimeDefault(t *testing.T) {
	h := newHarness(t)
	start := time.Date(2026, 11, 20, 23, 59, 30, 123, time.UTC)
	res, err := h.runWith(runs.PipelineInput{}, false, func(env *testsuite.TestWorkflowEnvironment) {
		env.SetStartTime(start)
	})
	if err != nil {
		t.Fatal(err)
	}
	wantOutputs(t, res, map[string]any{"time": "2026-11-20T23:59:30Z", "date": "2026-11-20", "yesterday": "2026-11-19"})
}

// A bad logical_date or time zone fails the run as InvalidPipeline before
// it resolves the pipeline or starts a node.
func TestRunValuesBadInputFailsBeforeNodes(t *testing.T) {
	for _, tc := range []struct{ date, tz, want string }{
		{"yesterday", "", `logical_date "yesterday" is not a date (YYYY-MM-DD) or a time (RFC 3339`},
		{"2026-02-30", "", `logical_date "2026-02-30" is not a date`},
		{"", "Mars/Olympus", `timezone "Mars/Olympus" is not a time zone name`},
	} {
		h := newHarness(t)
		_, err := h.runWith(runs.PipelineInput{LogicalDate: tc.date, Timezone: tc.tz}, true, nil)
		var appErr *temporal.ApplicationError
		if !errors.As(err, &appErr) || appErr.Type() != errtype.InvalidPipeline || !strings.Contains(appErr.Message(), tc.want) {
			t.Fatalf("%q/%q: error %v, want InvalidPipeline with %q", tc.date, tc.tz, err, tc.want)
		}
		res := mustFail(t, err)
		if len(res.Nodes) != 0 || len(h.order) != 0 {
			t.Errorf("nodes ran or were listed: %+v, %v", res.Nodes, h.order)
		}
	}
}

// A namespace with only the older attributes gets only those: an upsert of
// one it lacks would fail every workflow task.
func TestRunValuesSearchAttributesOnlyWhenThere(t *testing.T) {
	h := newHarness(t)
	env := h.NewTestWorkflowEnvironment()
	reg, _ := dags.NewRegistry(stepType)
	Register(env)
	env.RegisterActivityWithOptions((&Resolver{AllowInlineSpecs: true, Registry: reg, SearchAttributes: true}).Resolve,
		activity.RegisterOptions{Name: runs.ResolveActivity})
	env.RegisterActivityWithOptions(nodetype.Activity(h.step), activity.RegisterOptions{Name: "step"})
	env.OnUpsertTypedSearchAttributes(mock.Anything).Return(nil).Run(func(args mock.Arguments) {
		sa := args.Get(0).(temporal.SearchAttributes)
		if sa.Size() != 2 || !sa.ContainsKey(runs.PipelineKey) || !sa.ContainsKey(runs.ParamsDigestKey) {
			t.Errorf("upserted %d attributes, want only RetrainPipeline and RetrainParamsDigest", sa.Size())
		}
	}).Once()
	spec, _ := json.Marshal(runValuesSpec)
	env.ExecuteWorkflow(runs.PipelineWorkflow, runs.PipelineInput{Spec: spec, Schedule: "daily"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	env.AssertExpectations(t)
}

// A param whose value holds run values (what a schedule's params and a
// daily pipeline's defaults say) takes its value from the run's logical
// date; the result's params and digest show the values used.
func TestRunValuesInParams(t *testing.T) {
	const spec = `name: daily
params:
  end_date: {type: string, default: "${date_add(run.logical_date, -1)}"}
  start_date: {type: string, default: "2026-01-01"}
nodes:
  - id: a
    type: step
    with: {from: "${params.start_date}", to: "${params.end_date}"}
`
	digests := map[string]bool{}
	for _, tc := range []struct{ day, end, start string }{
		{"2026-10-05", "2026-10-04", "2026-01-01"},
		{"2026-10-06", "2026-10-05", "2026-01-01"},
	} {
		h := newHarness(t)
		in := runs.PipelineInput{LogicalDate: tc.day, Params: map[string]any{}}
		in.Spec, _ = json.Marshal(spec)
		res, err := h.runWith(in, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantOutputs(t, res, map[string]any{"to": tc.end, "from": tc.start})
		if res.Params["end_date"] != tc.end {
			t.Errorf("result params %v, want end_date %s", res.Params, tc.end)
		}
		digests[res.ParamsDigest] = true
	}
	if len(digests) != 2 {
		t.Errorf("runs for two dates share a params digest: %v", digests)
	}

	// A param may not refer to another param or a node: it is fixed
	// before anything runs.
	h := newHarness(t)
	in := runs.PipelineInput{Params: map[string]any{"end_date": "${params.start_date}"}}
	in.Spec, _ = json.Marshal(spec)
	res, err := h.runWith(in, false, nil)
	if err == nil && res.Status == runs.StatusSucceeded {
		t.Fatal("a param referring to another param was accepted")
	}
	if err == nil || !strings.Contains(err.Error(), `param "end_date": ${params.start_date}: a param's value may use run values`) {
		t.Errorf("error %v", err)
	}
}
