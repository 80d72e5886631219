// Package schedules turns the schedules a pipeline spec declares into
// Temporal Schedules and keeps the cluster's schedules matching the specs
// (Apply). A schedule's action starts the Pipeline workflow by pipeline
// name, so every run uses the worker's current spec; the run's logical time
// is the action's nominal time, which Temporal records on the run.
package schedules

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/runs"
)

// Prefix starts the id of every schedule retrain manages; Apply's prune
// deletes only schedules whose id has it.
const Prefix = "retrain/"

// MemoKey is the memo key, on the schedule and on every run it starts,
// holding the spec's schedule as a Record.
const MemoKey = "retrain_schedule"

// ScheduleAttr is the keyword search attribute naming the spec schedule a
// run came from, set on a run only where the namespace has it.
const ScheduleAttr = "RetrainSchedule"

// ID is the Temporal schedule id of a spec schedule.
func ID(pipeline, schedule string) string { return Prefix + pipeline + "/" + schedule }

// Split returns the pipeline and spec schedule id of a Temporal schedule
// id made by ID; ok is false for any other id.
func Split(id string) (pipeline, schedule string, ok bool) {
	rest, ok := strings.CutPrefix(id, Prefix)
	if !ok {
		return "", "", false
	}
	pipeline, schedule, ok = strings.Cut(rest, "/")
	return pipeline, schedule, ok && pipeline != "" && schedule != ""
}

// WorkflowIDPrefix is the workflow id prefix of the runs a schedule
// starts; Temporal appends the action's nominal time.
func WorkflowIDPrefix(pipeline, schedule string) string { return pipeline + "-" + schedule }

// Record is a spec schedule as the memo keeps it: what Apply compares to
// tell an unchanged schedule from a changed one (Temporal rewrites a cron
// string into calendars, so the described spec cannot be compared).
type Record struct {
	Pipeline       string         `json:"pipeline"`
	ID             string         `json:"id"`
	Cron           string         `json:"cron,omitempty"`
	Every          string         `json:"every,omitempty"`
	Timezone       string         `json:"timezone,omitempty"`
	Params         map[string]any `json:"params,omitempty"`
	CatchupWindow  string         `json:"catchup_window,omitempty"`
	Overlap        string         `json:"overlap"`
	PauseOnFailure bool           `json:"pause_on_failure,omitempty"`
	Jitter         string         `json:"jitter,omitempty"`
	Paused         bool           `json:"paused,omitempty"`
	TaskQueue      string         `json:"task_queue"`
	// DaylightSaving names the entries a cron in a zone with clock changes
	// gets so that it fires once on the days a change skips or repeats its
	// time (dst.go): a new time zone database changes it.
	DaylightSaving string `json:"daylight_saving,omitempty"`
	// WhenReady and Earliest are a data-triggered schedule's: its runs
	// start at Earliest on their date and wait for their data, with the
	// cron's time as their latest start.
	WhenReady bool   `json:"when_ready,omitempty"`
	Earliest  string `json:"earliest,omitempty"`
	File      string `json:"file,omitempty"` // the spec file it came from
}

// NewRecord describes a spec schedule of pipeline, run on taskQueue.
func NewRecord(pipeline string, sc *dags.Schedule, taskQueue, file string) Record {
	r := Record{
		Pipeline: pipeline, ID: sc.ID, Cron: sc.Cron, Timezone: sc.Timezone, Params: sc.Params,
		Overlap: cmp.Or(sc.Overlap, dags.DefaultOverlap), PauseOnFailure: sc.PauseOnFailure, Paused: sc.Paused,
		TaskQueue: taskQueue, File: file, WhenReady: sc.WhenReady, Earliest: sc.Earliest,
	}
	if sc.Every > 0 {
		r.Every = sc.Every.String()
	}
	if sc.CatchupWindow != nil {
		r.CatchupWindow = sc.CatchupWindow.String()
	}
	if sc.Jitter > 0 {
		r.Jitter = sc.Jitter.String()
	}
	return r
}

// same reports whether two records ask for the same schedule. The file is
// left out: moving a spec does not change its schedules. JSON makes the
// params' numbers compare alike however they were decoded.
func (r Record) same(o Record) bool {
	r.File, o.File = "", ""
	a, errA := json.Marshal(r)
	b, errB := json.Marshal(o)
	return errA == nil && errB == nil && string(a) == string(b)
}

// BuildOptions are the settings of the schedules Build makes.
type BuildOptions struct {
	TaskQueue string // default runs.DefaultTaskQueue
	File      string // the spec file, recorded in the memo and the note
	// WithScheduleAttr sets ScheduleAttr on the runs; only for a
	// namespace that has the attribute (Apply asks the server).
	WithScheduleAttr bool
}

// overlaps maps the spec's overlap names to Temporal's policies.
var overlaps = map[string]enumspb.ScheduleOverlapPolicy{
	"skip":            enumspb.SCHEDULE_OVERLAP_POLICY_SKIP,
	"buffer_one":      enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ONE,
	"buffer_all":      enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ALL,
	"cancel_other":    enumspb.SCHEDULE_OVERLAP_POLICY_CANCEL_OTHER,
	"terminate_other": enumspb.SCHEDULE_OVERLAP_POLICY_TERMINATE_OTHER,
	"allow_all":       enumspb.SCHEDULE_OVERLAP_POLICY_ALLOW_ALL,
}

// Overlap returns Temporal's policy for a spec overlap name ("" is skip).
func Overlap(name string) (enumspb.ScheduleOverlapPolicy, error) {
	p, ok := overlaps[cmp.Or(name, dags.DefaultOverlap)]
	if !ok {
		return 0, fmt.Errorf("unknown overlap %q", name)
	}
	return p, nil
}

// OverlapName is the spec name of a Temporal overlap policy.
func OverlapName(p enumspb.ScheduleOverlapPolicy) string {
	for name, q := range overlaps {
		if q == p {
			return name
		}
	}
	if p == enumspb.SCHEDULE_OVERLAP_POLICY_UNSPECIFIED {
		return dags.DefaultOverlap // the server's default
	}
	return p.String()
}

// Build returns the Temporal schedule for a spec schedule of pipeline.
func Build(pipeline string, sc *dags.Schedule, o BuildOptions) (client.ScheduleOptions, error) {
	queue := cmp.Or(o.TaskQueue, runs.DefaultTaskQueue)
	overlap, err := Overlap(sc.Overlap)
	if err != nil {
		return client.ScheduleOptions{}, fmt.Errorf("schedule %s of %s: %w", sc.ID, pipeline, err)
	}
	rec := NewRecord(pipeline, sc, queue, o.File)
	spec := client.ScheduleSpec{Jitter: sc.Jitter, TimeZoneName: sc.Timezone}
	input := runs.PipelineInput{Pipeline: pipeline, Params: sc.Params, Schedule: sc.ID, Timezone: sc.Timezone}
	switch {
	case sc.Cron != "":
		fire, latest, err := FireCron(rec)
		if err != nil {
			return client.ScheduleOptions{}, fmt.Errorf("schedule %s of %s: %w", sc.ID, pipeline, err)
		}
		input.LatestStart = latest
		spec.CronExpressions = []string{fire}
		adj, err := DaylightSaving(fire, sc.Timezone)
		if err != nil {
			return client.ScheduleOptions{}, fmt.Errorf("schedule %s of %s: %w", sc.ID, pipeline, err)
		}
		spec.Calendars, spec.Skip = adj.Calendars, adj.Skip
		rec.DaylightSaving = adj.Digest()
	case sc.Every > 0:
		spec.Intervals = []client.ScheduleIntervalSpec{{Every: sc.Every}}
	case sc.WhenReady:
		return client.ScheduleOptions{}, fmt.Errorf("schedule %s of %s: when_ready needs a cron", sc.ID, pipeline)
	default:
		return client.ScheduleOptions{}, fmt.Errorf("schedule %s of %s: no cron or every", sc.ID, pipeline)
	}
	attrs := []temporal.SearchAttributeUpdate{runs.PipelineKey.ValueSet(pipeline)}
	if o.WithScheduleAttr {
		attrs = append(attrs, temporal.NewSearchAttributeKeyKeyword(ScheduleAttr).ValueSet(sc.ID))
	}
	action := &client.ScheduleWorkflowAction{
		ID:       WorkflowIDPrefix(pipeline, sc.ID),
		Workflow: runs.PipelineWorkflow,
		// By name, not the spec's text: the worker's current spec runs.
		Args:                  []any{input},
		TaskQueue:             queue,
		Memo:                  map[string]any{MemoKey: rec},
		TypedSearchAttributes: temporal.NewSearchAttributes(attrs...),
		StaticSummary:         fmt.Sprintf("pipeline %s (schedule %s)", pipeline, sc.ID),
	}
	var catchup time.Duration
	if sc.CatchupWindow != nil {
		catchup = *sc.CatchupWindow
	}
	return client.ScheduleOptions{
		ID:                    ID(pipeline, sc.ID),
		Spec:                  spec,
		Action:                action,
		Overlap:               overlap,
		CatchupWindow:         catchup,
		PauseOnFailure:        sc.PauseOnFailure,
		Paused:                sc.Paused,
		Note:                  note(o.File),
		Memo:                  map[string]any{MemoKey: rec},
		TypedSearchAttributes: temporal.NewSearchAttributes(runs.PipelineKey.ValueSet(pipeline)),
	}, nil
}

// FireCron is the cron a schedule's Temporal schedule fires on: the
// spec's, or for a when_ready schedule the spec's moved to earliest on
// the same days (dags.ReadyCron); latest is then the cron's own time of
// day, the runs' latest start, and "" otherwise.
func FireCron(r Record) (fire, latest string, err error) {
	if !r.WhenReady {
		return r.Cron, "", nil
	}
	return dags.ReadyCron(r.Cron, cmp.Or(r.Earliest, dags.DefaultEarliest))
}

func note(file string) string {
	if file == "" {
		return "managed by retrain schedule apply"
	}
	return "managed by retrain schedule apply from " + file
}
