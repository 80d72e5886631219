package schedules

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// A schedule backfill starts one run per action the schedule would have
// taken on the dates asked for, whatever its overlap policy for live
// actions: Temporal applies the overlap policy to a backfill too, and a
// backfill under "skip" (the default) keeps the first date and drops the
// rest while it runs. So unless told otherwise (--overlap), a backfill
// runs them all: buffer_all (one after another, in date order), or with
// MaxParallel N, N at once: the dates are backfilled one action at a time
// with allow_all, the next as soon as fewer than N of them run.

// BackfillRequest asks for a backfill of a schedule.
type BackfillRequest struct {
	ID          string // the Temporal schedule id
	Namespace   string
	From, To    string // YYYY-MM-DD, both included, in the schedule's time zone
	Overlap     string // an overlap name, overriding the default (buffer_all)
	MaxParallel int    // > 1: at most this many runs at once (allow_all, one action at a time)
}

// BackfillPlan is a backfill worked out: the actions it takes.
type BackfillPlan struct {
	ID          string
	Record      Record         // the spec schedule, as recorded
	Location    *time.Location // the schedule's time zone
	Range       client.ScheduleBackfill
	Times       []time.Time       // each action's nominal time, in order
	MaxParallel int               // > 1: N at once, see BackfillRequest
	DST         map[string]DSTDay // the dates a clock change moves, by date
}

// Date is the logical date of a nominal time: its date in the schedule's
// time zone.
func (p *BackfillPlan) Date(t time.Time) string { return t.In(p.Location).Format(DateLayout) }

// How says how the runs start, for messages.
func (p *BackfillPlan) How() string {
	if p.MaxParallel > 1 {
		return fmt.Sprintf("at most %d at once", p.MaxParallel)
	}
	switch p.Range.Overlap {
	case enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ALL:
		return "overlap buffer_all: one after another"
	case enumspb.SCHEDULE_OVERLAP_POLICY_ALLOW_ALL:
		return "overlap allow_all: all at once"
	}
	return "overlap " + OverlapName(p.Range.Overlap) + ": actions that come due while a run goes on follow it"
}

// PlanBackfill works out a backfill: the time range Temporal is asked for
// (from the first date's midnight to the last date's end, in the
// schedule's time zone), the overlap policy, and the nominal times the
// schedule matches in it, as the server computes them (daylight-saving
// entries included).
func PlanBackfill(ctx context.Context, c client.Client, req BackfillRequest) (*BackfillPlan, error) {
	if _, err := Dates(req.From, req.To); err != nil {
		return nil, err
	}
	if req.MaxParallel > 1 && req.Overlap != "" {
		return nil, fmt.Errorf("--max-parallel starts the runs with allow_all, %d at a time: leave out --overlap", req.MaxParallel)
	}
	h := c.ScheduleClient().GetHandle(ctx, req.ID)
	desc, err := h.Describe(ctx)
	if err != nil {
		return nil, fmt.Errorf("schedule %s: %w", req.ID, err)
	}
	tzName := ""
	if desc.Schedule.Spec != nil {
		tzName = desc.Schedule.Spec.TimeZoneName
	}
	loc, err := time.LoadLocation(cmp.Or(tzName, "UTC"))
	if err != nil {
		return nil, fmt.Errorf("schedule %s: time zone %q: %w", req.ID, tzName, err)
	}
	f, _ := time.ParseInLocation(DateLayout, req.From, loc)
	t, _ := time.ParseInLocation(DateLayout, req.To, loc)
	rec, _ := RecordOf(desc)
	policy := enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ALL
	switch {
	case req.Overlap != "":
		if policy, err = Overlap(req.Overlap); err != nil {
			return nil, err
		}
	case req.MaxParallel > 1:
		policy = enumspb.SCHEDULE_OVERLAP_POLICY_ALLOW_ALL
	case rec.WhenReady:
		// Each run waits for its own date's data: one after another, a
		// date without data would hold back every later one.
		policy = enumspb.SCHEDULE_OVERLAP_POLICY_ALLOW_ALL
	}
	p := &BackfillPlan{
		ID: req.ID, Record: rec, Location: loc, MaxParallel: req.MaxParallel, DST: map[string]DSTDay{},
		// Temporal takes the actions strictly after Start and up to End: a
		// second's margin keeps an action at midnight on the first date and
		// leaves out one at midnight after the last.
		Range: client.ScheduleBackfill{
			Start:   f.Add(-time.Second),
			End:     t.AddDate(0, 0, 1).Add(-time.Second),
			Overlap: policy,
		},
	}
	resp, err := c.WorkflowService().ListScheduleMatchingTimes(ctx, &workflowservice.ListScheduleMatchingTimesRequest{
		Namespace: req.Namespace, ScheduleId: req.ID,
		StartTime: timestamppb.New(p.Range.Start), EndTime: timestamppb.New(p.Range.End),
	})
	if err != nil {
		return nil, fmt.Errorf("schedule %s: the actions from %s to %s: %w", req.ID, req.From, req.To, err)
	}
	for _, ts := range resp.GetStartTime() {
		p.Times = append(p.Times, ts.AsTime())
	}
	if fire, _, err := FireCron(rec); err == nil && fire != "" {
		if adj, err := DaylightSaving(fire, rec.Timezone); err == nil {
			for _, d := range adj.Days {
				p.DST[d.Date] = d
			}
		}
	}
	return p, nil
}

// Note says what a clock change does to the action at t, or "".
func (p *BackfillPlan) Note(t time.Time) string {
	d, ok := p.DST[p.Date(t)]
	if !ok || !d.At.Equal(t) {
		return ""
	}
	if d.Repeat {
		return fmt.Sprintf("%s occurs twice that day: once, after the repeated hour", strings.Join(d.Missed, ", "))
	}
	return fmt.Sprintf("%s does not exist that day: at the first time after the gap", strings.Join(d.Missed, ", "))
}

// Run asks Temporal for the plan's actions. With MaxParallel, it backfills
// one action at a time, each once fewer than MaxParallel runs of this
// backfill are running, and returns once the last has started; started is
// called as each one starts. Without, it makes one request and returns.
// since is when the backfill began, to tell its runs from earlier ones.
func (p *BackfillPlan) Run(ctx context.Context, c client.Client, since time.Time, started func(time.Time, string)) error {
	h := c.ScheduleClient().GetHandle(ctx, p.ID)
	if p.MaxParallel <= 1 || p.MaxParallel >= len(p.Times) {
		if len(p.Times) == 0 {
			return nil
		}
		if err := h.Backfill(ctx, client.ScheduleBackfillOptions{Backfill: []client.ScheduleBackfill{p.Range}}); err != nil {
			return fmt.Errorf("backfill schedule %s: %w", p.ID, err)
		}
		return nil
	}
	for _, t := range p.Times {
		for {
			runs, err := p.Started(ctx, c, since)
			if err != nil {
				return err
			}
			running := 0
			for _, r := range runs {
				if r.Running {
					running++
				}
			}
			if running < p.MaxParallel {
				break
			}
			if err := sleep(ctx, 500*time.Millisecond); err != nil {
				return err
			}
		}
		bf := client.ScheduleBackfill{Start: t.Add(-time.Second), End: t, Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_ALLOW_ALL}
		if err := h.Backfill(ctx, client.ScheduleBackfillOptions{Backfill: []client.ScheduleBackfill{bf}}); err != nil {
			return fmt.Errorf("backfill schedule %s for %s: %w", p.ID, p.Date(t), err)
		}
		deadline := time.Now().Add(time.Minute)
		for {
			runs, err := p.Started(ctx, c, since)
			if err != nil {
				return err
			}
			if r, ok := runs[t.Unix()]; ok {
				if started != nil {
					started(t, r.ID)
				}
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("backfill schedule %s: the run for %s did not start within a minute", p.ID, p.Date(t))
			}
			if err := sleep(ctx, 300*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return nil
}

// BackfillRun is a run a backfill started.
type BackfillRun struct {
	ID      string
	Nominal time.Time
	Running bool
}

// Started returns the runs the schedule started since then for the plan's
// nominal times, by nominal time (Unix seconds), from visibility (which
// lags a run's start by a moment).
func (p *BackfillPlan) Started(ctx context.Context, c client.Client, since time.Time) (map[int64]BackfillRun, error) {
	want := map[int64]bool{}
	for _, t := range p.Times {
		want[t.Unix()] = true
	}
	q := fmt.Sprintf("TemporalScheduledById = %s AND StartTime >= %s AND TemporalScheduledStartTime > %s AND TemporalScheduledStartTime <= %s",
		quote(p.ID), quote(since.UTC().Format(time.RFC3339Nano)),
		quote(p.Range.Start.UTC().Format(time.RFC3339)), quote(p.Range.End.UTC().Format(time.RFC3339)))
	out := map[int64]BackfillRun{}
	var token []byte
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: q, PageSize: 1000, NextPageToken: token})
		if err != nil {
			return nil, fmt.Errorf("list the runs of schedule %s: %w", p.ID, err)
		}
		for _, e := range resp.GetExecutions() {
			var at time.Time
			pl := e.GetSearchAttributes().GetIndexedFields()["TemporalScheduledStartTime"]
			if pl == nil || converter.GetDefaultDataConverter().FromPayload(pl, &at) != nil || !want[at.Unix()] {
				continue
			}
			out[at.Unix()] = BackfillRun{
				ID: e.GetExecution().GetWorkflowId(), Nominal: at,
				Running: e.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return out, nil
		}
	}
}

// WaitStarted polls until every action of the plan has a run or wait has
// passed, and returns the runs found.
func (p *BackfillPlan) WaitStarted(ctx context.Context, c client.Client, since time.Time, wait time.Duration) (map[int64]BackfillRun, error) {
	deadline := time.Now().Add(wait)
	for {
		runs, err := p.Started(ctx, c, since)
		if err != nil || len(runs) >= len(p.Times) || time.Now().After(deadline) {
			return runs, err
		}
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return runs, err
		}
	}
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
