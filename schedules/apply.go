package schedules

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/retrain-ml/retrain/dags"
)

// What Apply did, or would do, to one schedule.
const (
	Created   = "create"
	Updated   = "update"
	Deleted   = "delete"
	Unchanged = "unchanged"
)

// Change is one schedule's outcome of Apply.
type Change struct {
	ID     string // the Temporal schedule id
	Action string // Created, Updated, Deleted or Unchanged
	Detail string // what it fires on, or what differs
	DryRun bool   // nothing was done
}

func (c Change) String() string {
	verb := map[string]string{Created: "created", Updated: "updated", Deleted: "deleted", Unchanged: "unchanged"}[c.Action]
	if c.DryRun && c.Action != Unchanged {
		verb = "would " + c.Action
	}
	if c.Detail == "" {
		return fmt.Sprintf("%s %s", c.ID, verb)
	}
	return fmt.Sprintf("%s %s (%s)", c.ID, verb, c.Detail)
}

// ApplyOptions say how Apply works.
type ApplyOptions struct {
	TaskQueue string // the runs' task queue; default runs.DefaultTaskQueue
	// Namespace is asked whether it has the ScheduleAttr search attribute;
	// empty: runs do not get it.
	Namespace string
	DryRun    bool // report what would change, change nothing
	Prune     bool // delete retrain schedules (ids with Prefix) that no spec declares
	// Files names the spec file of each pipeline, for memos and notes.
	Files map[string]string
}

// Apply makes the cluster's schedules match the schedules the specs
// declare: it creates the missing ones, updates those whose spec changed
// (a schedule whose spec did not change is left alone, even if it was
// paused since, by hand or by pause_on_failure) and, with Prune, deletes
// retrain's schedules no spec declares. Running it again changes nothing.
func Apply(ctx context.Context, c client.Client, specs []*dags.Spec, o ApplyOptions) ([]Change, error) {
	withAttr, err := hasScheduleAttr(ctx, c, o.Namespace)
	if err != nil {
		return nil, err
	}
	var changes []Change
	want := map[string]bool{}
	pipelines := map[string]bool{}
	for _, spec := range specs {
		if pipelines[spec.Name] {
			return changes, fmt.Errorf("pipeline %s is declared by more than one spec", spec.Name)
		}
		pipelines[spec.Name] = true
		for _, sc := range spec.Schedules {
			bo := BuildOptions{TaskQueue: o.TaskQueue, File: o.Files[spec.Name], WithScheduleAttr: withAttr}
			opts, err := Build(spec.Name, sc, bo)
			if err != nil {
				return changes, err
			}
			want[opts.ID] = true
			ch, err := applyOne(ctx, c, opts, o.DryRun)
			if err != nil {
				return changes, err
			}
			changes = append(changes, ch)
		}
	}
	if !o.Prune {
		return changes, nil
	}
	ids, err := ListIDs(ctx, c)
	if err != nil {
		return changes, err
	}
	for _, id := range ids {
		if want[id] {
			continue
		}
		if !o.DryRun {
			if err := c.ScheduleClient().GetHandle(ctx, id).Delete(ctx); err != nil && !isNotFound(err) {
				return changes, fmt.Errorf("delete schedule %s: %w", id, err)
			}
		}
		changes = append(changes, Change{ID: id, Action: Deleted, Detail: "no spec declares it", DryRun: o.DryRun})
	}
	return changes, nil
}

// applyOne creates or updates one schedule.
func applyOne(ctx context.Context, c client.Client, opts client.ScheduleOptions, dryRun bool) (Change, error) {
	want := opts.Memo[MemoKey].(Record)
	h := c.ScheduleClient().GetHandle(ctx, opts.ID)
	desc, err := h.Describe(ctx)
	if isNotFound(err) {
		ch := Change{ID: opts.ID, Action: Created, Detail: fires(want), DryRun: dryRun}
		if dryRun {
			return ch, nil
		}
		if _, err := c.ScheduleClient().Create(ctx, opts); err != nil {
			return ch, fmt.Errorf("create schedule %s: %w", opts.ID, err)
		}
		return ch, nil
	}
	if err != nil {
		return Change{}, fmt.Errorf("describe schedule %s: %w", opts.ID, err)
	}
	diff := differences(desc, opts, want)
	if len(diff) == 0 {
		return Change{ID: opts.ID, Action: Unchanged}, nil
	}
	ch := Change{ID: opts.ID, Action: Updated, Detail: strings.Join(diff, ", "), DryRun: dryRun}
	if dryRun {
		return ch, nil
	}
	err = h.Update(ctx, client.ScheduleUpdateOptions{DoUpdate: func(client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
		spec := opts.Spec
		return &client.ScheduleUpdate{Schedule: &client.Schedule{
			Action: opts.Action,
			Spec:   &spec,
			Policy: &client.SchedulePolicies{Overlap: opts.Overlap, CatchupWindow: opts.CatchupWindow, PauseOnFailure: opts.PauseOnFailure},
			State:  &client.ScheduleState{Note: opts.Note, Paused: opts.Paused},
		}}, nil
	}})
	if err != nil {
		return ch, fmt.Errorf("update schedule %s: %w", opts.ID, err)
	}
	return ch, nil
}

// differences lists what differs between a schedule on the cluster and
// the one wanted: the recorded spec schedule and the action's basics.
func differences(desc *client.ScheduleDescription, opts client.ScheduleOptions, want Record) []string {
	action, ok := desc.Schedule.Action.(*client.ScheduleWorkflowAction)
	if !ok {
		return []string{"not a workflow action"}
	}
	var diff []string
	wantAction := opts.Action.(*client.ScheduleWorkflowAction)
	if fmt.Sprint(action.Workflow) != fmt.Sprint(wantAction.Workflow) {
		diff = append(diff, "workflow type")
	}
	if action.TaskQueue != wantAction.TaskQueue {
		diff = append(diff, "task queue")
	}
	if action.ID != wantAction.ID {
		diff = append(diff, "workflow id")
	}
	if hasAttr(action, ScheduleAttr) != hasAttr(wantAction, ScheduleAttr) {
		diff = append(diff, "search attributes")
	}
	have, ok := actionRecord(action)
	if !ok {
		return append(diff, "no recorded spec")
	}
	diff = append(diff, recordDiff(have, want)...)
	return diff
}

// recordDiff names the fields of the spec schedule that changed.
func recordDiff(have, want Record) []string {
	if have.same(want) {
		return nil
	}
	var out []string
	field := func(name string, a, b any) {
		if fmt.Sprint(a) != fmt.Sprint(b) {
			out = append(out, name)
		}
	}
	field("cron", have.Cron, want.Cron)
	field("every", have.Every, want.Every)
	field("timezone", have.Timezone, want.Timezone)
	a, b := have, want
	a.Params, b.Params = nil, nil
	if !(Record{Params: have.Params}).same(Record{Params: want.Params}) {
		out = append(out, "params")
	}
	field("catchup_window", a.CatchupWindow, b.CatchupWindow)
	field("overlap", a.Overlap, b.Overlap)
	field("pause_on_failure", a.PauseOnFailure, b.PauseOnFailure)
	field("jitter", a.Jitter, b.Jitter)
	field("paused", a.Paused, b.Paused)
	field("task_queue", a.TaskQueue, b.TaskQueue)
	field("daylight_saving", a.DaylightSaving, b.DaylightSaving)
	field("when_ready", a.WhenReady, b.WhenReady)
	field("earliest", a.Earliest, b.Earliest)
	if len(out) == 0 {
		out = append(out, "spec")
	}
	return out
}

// actionRecord decodes the spec schedule an action's memo records: a
// Record as built, or the payload a described schedule holds.
func actionRecord(a *client.ScheduleWorkflowAction) (Record, bool) {
	var r Record
	switch v := a.Memo[MemoKey].(type) {
	case Record:
		return v, true
	case *commonpb.Payload:
		return r, converter.GetDefaultDataConverter().FromPayload(v, &r) == nil
	}
	return r, false
}

// hasAttr reports whether an action sets the search attribute name.
func hasAttr(a *client.ScheduleWorkflowAction, name string) bool {
	if _, ok := a.UntypedSearchAttributes[name]; ok {
		return true
	}
	for k := range a.TypedSearchAttributes.GetUntypedValues() {
		if k.GetName() == name {
			return true
		}
	}
	return false
}

// RecordOf returns the spec schedule recorded on a described schedule.
func RecordOf(desc *client.ScheduleDescription) (Record, bool) {
	a, ok := desc.Schedule.Action.(*client.ScheduleWorkflowAction)
	if !ok {
		return Record{}, false
	}
	return actionRecord(a)
}

// fires says when a schedule fires, for messages.
func fires(r Record) string {
	s := "cron " + r.Cron
	if r.Every != "" {
		s = "every " + r.Every
	}
	if r.Timezone != "" {
		s += " " + r.Timezone
	}
	if r.WhenReady {
		s += ", when ready from " + cmp.Or(r.Earliest, dags.DefaultEarliest)
	}
	return s
}

// ListIDs returns the ids of the schedules retrain manages, sorted.
func ListIDs(ctx context.Context, c client.Client) ([]string, error) {
	it, err := c.ScheduleClient().List(ctx, client.ScheduleListOptions{PageSize: 500})
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	var ids []string
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return nil, fmt.Errorf("list schedules: %w", err)
		}
		if strings.HasPrefix(e.ID, Prefix) {
			ids = append(ids, e.ID)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// hasScheduleAttr asks whether the namespace has ScheduleAttr; a run that
// sets an attribute the namespace lacks fails to start.
func hasScheduleAttr(ctx context.Context, c client.Client, namespace string) (bool, error) {
	if namespace == "" {
		return false, nil
	}
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return false, fmt.Errorf("list search attributes of %s: %w", namespace, err)
	}
	_, ok := resp.GetCustomAttributes()[ScheduleAttr]
	return ok, nil
}

func isNotFound(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf)
}
