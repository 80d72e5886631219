package workflows

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	ready "github.com/retrain-ml/retrain/internal/readiness"
	"github.com/retrain-ml/retrain/runs"
)

// readyRunSpec waits for a table, then outputs its run values.
const readyRunSpec = `name: daily
wait_for:
  - {table: features.user_daily, deadline: 1h, poll: 10m}
nodes:
  - id: a
    type: step
    with: {time: "${run.logical_time}", date: "${run.logical_date}"}
`

// runWhenReady runs readyRunSpec as a when_ready schedule starts it: an
// action at nominal, whose cron time is latest (HH:MM), started at start;
// data is the readiness check.
func runWhenReady(t *testing.T, nominal, start time.Time, latest string, data *dataAfter) (*runs.Result, error) {
	h := newHarness(t)
	spec, _ := json.Marshal(readyRunSpec)
	in := runs.PipelineInput{Spec: spec, SpecFile: "daily.yaml", Schedule: "daily", LatestStart: latest}
	return h.runWith(in, false, func(env *testsuite.TestWorkflowEnvironment) {
		env.SetStartTime(start)
		if err := env.SetTypedSearchAttributesOnStart(temporal.NewSearchAttributes(
			temporal.NewSearchAttributeKeyTime(scheduledStartTimeAttr).ValueSet(nominal),
		)); err != nil {
			t.Fatal(err)
		}
		env.RegisterActivityWithOptions(func(_ context.Context, in runs.ReadinessCheck) (ready.Observation, error) {
			return data.check(in)
		}, activity.RegisterOptions{Name: runs.ReadinessActivity})
	})
}

// A when_ready run fired at midnight starts its node as soon as its data
// is there, hours before the cron time, and is for the cron time.
func TestWhenReadyRunStartsOnceDataHolds(t *testing.T) {
	midnight := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	data := &dataAfter{n: 2}
	res, err := runWhenReady(t, midnight, midnight, "03:00", data)
	if err != nil {
		t.Fatal(err)
	}
	wantOutputs(t, res, map[string]any{"time": "2026-11-27T03:00:00Z", "date": "2026-11-27"})
	if res.LogicalDate != "2026-11-27" || res.LogicalTime != "2026-11-27T03:00:00Z" {
		t.Errorf("result logical date %s time %s", res.LogicalDate, res.LogicalTime)
	}
	// Checks at 0, 10m and 25m: the third saw the data, and the run went
	// on to its node then, not at 03:00.
	if len(res.Ready) != 1 || !res.Ready[0].At.Equal(midnight.Add(25*time.Minute)) {
		t.Errorf("ready %+v, want seen at 00:25", res.Ready)
	}
	if len(data.asked) != 3 {
		t.Errorf("%d checks, want 3", len(data.asked))
	}
	if c := data.asked[0]; c.LogicalDate != "2026-11-27" {
		t.Errorf("checked for %s", c.LogicalDate)
	}
}

// Its data never lands: the wait's 1h deadline counts from the cron
// time, 03:00, not from the early start.
func TestWhenReadyRunDeadlineFromCronTime(t *testing.T) {
	midnight := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	_, err := runWhenReady(t, midnight, midnight, "03:00", &dataAfter{n: 1 << 30})
	res := mustFail(t, err)
	if !strings.Contains(res.Error, "wait_for table features.user_daily did not hold within its deadline 1h0m0s from its latest start 2026-11-27T03:00:00Z (") ||
		!strings.Contains(res.Error, "no rows for 2026-11-27") {
		t.Errorf("error %q", res.Error)
	}
	if end := res.EndedAt; end == nil || !end.Equal(midnight.Add(4*time.Hour)) {
		t.Errorf("failed at %v, want 04:00 (the 03:00 cron time + the 1h deadline)", end)
	}
}

// A run that begins after its cron time (a backfill of past dates, a
// buffered action) waits its full deadline from when it began.
func TestWhenReadyRunStartedLate(t *testing.T) {
	midnight := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	began := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	_, err := runWhenReady(t, midnight, began, "03:00", &dataAfter{n: 1 << 30})
	res := mustFail(t, err)
	if !strings.Contains(res.Error, "within its deadline 1h0m0s (") {
		t.Errorf("error %q", res.Error)
	}
	if end := res.EndedAt; end == nil || !end.Equal(began.Add(time.Hour)) {
		t.Errorf("failed at %v, want an hour after it began, %s", end, began.Add(time.Hour))
	}
	if res.LogicalTime != "2026-11-20T03:00:00Z" {
		t.Errorf("logical time %s", res.LogicalTime)
	}
}

// A latest_start that is no time of day fails the run before any node.
func TestWhenReadyBadLatestStart(t *testing.T) {
	midnight := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	_, err := runWhenReady(t, midnight, midnight, "3am", &dataAfter{})
	res := mustFail(t, err)
	if !strings.Contains(res.Error, `latest_start: "3am" is not a time of day`) {
		t.Errorf("error %q", res.Error)
	}
}

// A run a when_ready schedule started early whose pipeline has no
// wait_for (the worker has another copy of the spec) has nothing to wait
// for: it starts at its cron time, not early.
func TestWhenReadyRunWithoutConditionsStartsAtCronTime(t *testing.T) {
	midnight := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	h := newHarness(t)
	spec, _ := json.Marshal("name: daily\nnodes:\n  - {id: a, type: step, with: {time: \"${run.logical_time}\"}}\n")
	var st runs.Result
	res, err := h.runWith(runs.PipelineInput{Spec: spec, SpecFile: "daily.yaml", LatestStart: "03:00"}, false, func(env *testsuite.TestWorkflowEnvironment) {
		env.SetStartTime(midnight)
		if err := env.SetTypedSearchAttributesOnStart(temporal.NewSearchAttributes(
			temporal.NewSearchAttributeKeyTime(scheduledStartTimeAttr).ValueSet(midnight),
		)); err != nil {
			t.Fatal(err)
		}
		env.RegisterDelayedCallback(func() {
			v, err := env.QueryWorkflow(runs.StateQuery)
			if err == nil {
				err = v.Get(&st)
			}
			if err != nil {
				t.Error(err)
			}
		}, time.Hour)
	})
	if err != nil {
		t.Fatal(err)
	}
	wantOutputs(t, res, map[string]any{"time": "2026-11-27T03:00:00Z"})
	if st.Status != runs.StatusWaiting || len(st.Waiting) != 1 || !strings.Contains(st.Waiting[0].Saw, "has no wait_for") {
		t.Errorf("at 01:00: %s %+v", st.Status, st.Waiting)
	}
	if n := st.Node("a"); n == nil || n.Status != runs.NodePending {
		t.Errorf("at 01:00 node a is %+v", n)
	}
	if res.EndedAt == nil || res.EndedAt.Before(midnight.Add(3*time.Hour)) {
		t.Errorf("ended at %v, before the 03:00 cron time", res.EndedAt)
	}
}
