package workflows

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/runs"
)

// Search attributes Temporal sets on a run that a Schedule starts (its
// action, a trigger or a backfill): the action's nominal time, and the
// schedule's id.
const (
	scheduledStartTimeAttr = "TemporalScheduledStartTime"
	scheduledByIDAttr      = "TemporalScheduledById"
)

// runStart is what a run knows about itself before it resolves its
// pipeline: its run values but the pipeline's name, and its schedule.
type runStart struct {
	values   dags.RunValues
	schedule string // the schedule that started it; "" for none
	// latest is a when_ready run's latest start (its input's
	// latest_start on its date); zero for any other run.
	latest time.Time
}

// runValues computes the run values from the workflow's start event and
// input, so replay computes the same. The logical time is, first, the
// nominal time of the Schedule action that started the run (never the
// moment a worker got to it: a backfill of last month gives last month's
// times); else the input's logical_date; else the workflow's start time.
// The logical date is its date in the input's time zone (default UTC).
// A bad time zone or logical_date fails the run as InvalidPipeline.
func runValues(ctx workflow.Context, in runs.PipelineInput) (runStart, error) {
	info := workflow.GetInfo(ctx)
	loc := time.UTC
	if in.Timezone != "" {
		l, err := time.LoadLocation(in.Timezone)
		if err != nil || in.Timezone == "Local" {
			return runStart{}, invalidInput(in, fmt.Sprintf("timezone %q is not a time zone name such as Europe/Paris or UTC", in.Timezone))
		}
		loc = l
	}
	attrs := info.SearchAttributes.GetIndexedFields()
	t, scheduled := timeAttr(attrs[scheduledStartTimeAttr])
	switch {
	case scheduled:
	case in.LogicalDate != "":
		var err error
		if t, err = parseLogicalDate(in.LogicalDate, loc); err != nil {
			return runStart{}, invalidInput(in, err.Error())
		}
	default:
		t = info.WorkflowStartTime
	}
	t = t.In(loc)
	// A when_ready schedule fires early on the date and names its cron's
	// time: the run is for that time, as a run the cron started would be.
	// Inputs recorded before latest_start existed have none.
	var latest time.Time
	if in.LatestStart != "" {
		var err error
		if latest, err = dags.LatestStart(t, in.LatestStart); err != nil {
			return runStart{}, invalidInput(in, "latest_start: "+err.Error())
		}
		t = latest
	}
	return runStart{
		latest: latest,
		values: dags.RunValues{
			ID:          info.WorkflowExecution.ID,
			LogicalTime: t.Format(time.RFC3339),
			LogicalDate: t.Format(time.DateOnly),
			Timezone:    in.Timezone,
		},
		schedule: cmp.Or(in.Schedule, stringAttr(attrs[scheduledByIDAttr])),
	}, nil
}

// parseLogicalDate reads logical_date: a date (midnight in loc) or an
// RFC 3339 time.
func parseLogicalDate(s string, loc *time.Location) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.ParseInLocation(time.DateOnly, s, loc); err == nil {
		return t, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() < 1 || t.Year() > 9999 {
		return time.Time{}, fmt.Errorf("logical_date %q is not a date (YYYY-MM-DD) or a time (RFC 3339, such as 2026-11-20T06:00:00Z)", s)
	}
	return t, nil
}

func invalidInput(in runs.PipelineInput, msg string) error {
	return temporal.NewNonRetryableApplicationError(msg, errtype.InvalidPipeline, nil,
		ResolveFailure{Pipeline: in.Pipeline})
}

// timeAttr decodes a Datetime search attribute (JSON text, RFC 3339).
func timeAttr(p *commonpb.Payload) (time.Time, bool) {
	if p == nil {
		return time.Time{}, false
	}
	var t time.Time
	if err := converter.GetDefaultDataConverter().FromPayload(p, &t); err != nil || t.IsZero() {
		return time.Time{}, false
	}
	return t, true
}

func stringAttr(p *commonpb.Payload) string {
	var s string
	if p == nil || converter.GetDefaultDataConverter().FromPayload(p, &s) != nil {
		return ""
	}
	return s
}

// setRunValues completes the run values once the pipeline is resolved.
func (r *pipelineRun) setRunValues(start runStart) error {
	r.values = start.values
	r.values.Pipeline = r.plan.Pipeline
	r.schedule = start.schedule
	r.latestStart = start.latest
	r.result.LogicalDate = r.values.LogicalDate
	// Params whose values hold run values (a schedule's end_date:
	// ${date_add(run.logical_date, -1)}) take their value now; the run's
	// result and params digest show what the run used.
	params, changed, err := r.resolveRunParams() // taskguard.go: fails as InvalidPipeline
	if err != nil {
		return err
	}
	if changed {
		digest, err := dags.ParamsDigest(params)
		if err != nil {
			return err
		}
		r.plan.Params, r.plan.ParamsDigest = params, digest
		r.result.Params, r.result.ParamsDigest = params, digest
	}
	return nil
}

// searchAttributes are the labels a resolved run upserts: its pipeline and
// params always, its schedule and logical date where the namespace has
// those attributes (an upsert of one it lacks fails every workflow task,
// and a namespace set up for an older retrain may lack them).
func (r *pipelineRun) searchAttributes(resolved ResolveOutput) []temporal.SearchAttributeUpdate {
	up := []temporal.SearchAttributeUpdate{
		runs.PipelineKey.ValueSet(r.plan.Pipeline), runs.ParamsDigestKey.ValueSet(r.plan.ParamsDigest),
	}
	if resolved.RunSearchAttributes {
		up = append(up, runs.LogicalDateKey.ValueSet(r.values.LogicalDate))
		if r.schedule != "" {
			up = append(up, runs.ScheduleKey.ValueSet(label(r.schedule)))
		}
	}
	return up
}
