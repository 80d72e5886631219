package runs

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
)

// RerunRequest starts a rerun of an earlier run (Rerun).
type RerunRequest struct {
	Run string // the earlier run's id
	// From are nodes to run again, with everything downstream of them;
	// empty: run again what failed, or was cancelled or skipped by the
	// failure.
	From []string
	// Params override the earlier run's params, by name.
	Params    map[string]any
	ID        string // the new run's id; generated when empty
	TaskQueue string // default DefaultTaskQueue
}

// refusal marks an error that says the run cannot be rerun (as opposed
// to one reading it): retrying does not help.
type refusal struct{ error }

func (r refusal) Unwrap() error { return r.error }

func refuse(err error) error { return refusal{err} }

// IsRefusal reports whether err refuses a rerun for what the run is (it
// does not exist, is still running, left no result), not for a failure
// to read it.
func IsRefusal(err error) bool {
	_, ok := errors.AsType[refusal](err)
	return ok
}

// ErrRunNotFound is the error of a rerun of a run that does not exist.
var ErrRunNotFound = errors.New("does not exist")

// Rerun starts a new run of the pipeline an earlier run ran, with its
// params (overridden by req.Params) and logical time, that takes over the
// earlier run's results of the nodes it need not run again (see Reuse)
// and runs the rest. It refuses, before starting anything, a run that
// does not exist, is still running or never resolved its pipeline, and a
// From node the earlier run's pipeline lacks; the new run refuses a From
// node its own plan lacks before running a node.
func Rerun(ctx context.Context, c client.Client, req RerunRequest) (Run, error) {
	if strings.TrimSpace(req.Run) == "" {
		return Run{}, errors.New("rerun: name the run to rerun")
	}
	earlier, err := rerunSource(ctx, c, req.Run)
	if err != nil {
		return Run{}, err
	}
	if err := checkFrom(earlier.plan, req.Run, req.From); err != nil {
		return Run{}, err
	}
	in := earlier.input
	in.Params = maps.Clone(in.Params)
	if in.Params == nil && len(req.Params) > 0 {
		in.Params = map[string]any{}
	}
	maps.Copy(in.Params, req.Params)
	// The same moment: a scheduled run's nominal time came from its
	// schedule, which does not start this one.
	in.LogicalDate = cmp.Or(earlier.result.LogicalTime, in.LogicalDate, earlier.result.LogicalDate)
	// Nor is a rerun held back by a when_ready schedule's latest start:
	// LogicalDate above already names the moment it was for.
	in.Schedule, in.DryRun, in.LatestStart = "", false, ""
	// Only which run and which nodes: the workflow loads the earlier
	// run's results on a worker (LoadReuse), never trusting a starter's.
	in.Reuse = &Reuse{Run: req.Run, From: slices.Clone(req.From)}
	name := cmp.Or(earlier.result.Pipeline, in.Pipeline, "pipeline")
	id := cmp.Or(req.ID, NewID(name))
	we, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       id,
		TaskQueue:                cmp.Or(req.TaskQueue, DefaultTaskQueue),
		StaticSummary:            fmt.Sprintf("pipeline %s (rerun of %s)", name, req.Run),
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
	}, PipelineWorkflow, in)
	if err != nil {
		return Run{}, fmt.Errorf("start rerun %s of run %s: %w", id, req.Run, err)
	}
	return Run{ID: we.GetID(), RunID: we.GetRunID()}, nil
}

// LoadReuse reads what a rerun of run id reuses: the earlier run's plan,
// its nodes (a foreach node's instances left out) and its succeeded
// compensations. Workers run it as LoadReuseActivity, so the results a
// rerun takes over are the earlier run's own, whatever its starter sent.
func LoadReuse(ctx context.Context, c client.Client, id string) (*Reuse, error) {
	earlier, err := rerunSource(ctx, c, id)
	if err != nil {
		return nil, err
	}
	out := &Reuse{Run: id, Plan: earlier.rawPlan}
	inPlan := map[string]bool{}
	for _, n := range earlier.plan.Nodes {
		inPlan[n.ID] = true
	}
	for _, n := range earlier.result.Nodes {
		if inPlan[n.ID] {
			out.Nodes = append(out.Nodes, n)
		}
	}
	for _, n := range earlier.result.Compensations {
		if n.Status == NodeSucceeded {
			out.Compensations = append(out.Compensations, n)
		}
	}
	return out, nil
}

// earlierRun is what a rerun reads of the run it reruns.
type earlierRun struct {
	input   PipelineInput
	result  *Result
	rawPlan json.RawMessage
	plan    planNodes
}

// planNodes is the part of a dags.Plan a rerun's checks read, so that
// this package does not link the spec compiler.
type planNodes struct {
	Nodes []struct {
		ID string `json:"id"`
	} `json:"nodes"`
}

// rerunSource reads the earlier run: its start input, its result and its
// plan (which a worker answers by replaying the run).
func rerunSource(ctx context.Context, c client.Client, id string) (earlierRun, error) {
	desc, err := c.DescribeWorkflowExecution(ctx, id, "")
	if _, ok := errors.AsType[*serviceerror.NotFound](err); ok {
		return earlierRun{}, refuse(fmt.Errorf("rerun: run %q %w", id, ErrRunNotFound))
	}
	if err != nil {
		return earlierRun{}, fmt.Errorf("rerun: run %s: %w", id, err)
	}
	info := desc.GetWorkflowExecutionInfo()
	if t := info.GetType().GetName(); t != PipelineWorkflow {
		return earlierRun{}, refuse(fmt.Errorf("rerun: %s is a %s workflow, not a pipeline run", id, t))
	}
	switch info.GetStatus() {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		return earlierRun{}, refuse(fmt.Errorf("rerun: run %s is still running; rerun it once it has ended", id))
	case enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
		return earlierRun{}, refuse(fmt.Errorf("rerun: run %s was %s and left no result to reuse; start a new run", id,
			strings.ToLower(strings.TrimPrefix(info.GetStatus().String(), "WORKFLOW_EXECUTION_STATUS_"))))
	}
	runID := info.GetExecution().GetRunId()
	var out earlierRun
	if out.input, err = startInput(ctx, c, id, runID); err != nil {
		return earlierRun{}, err
	}
	if out.input.DryRun || strings.HasPrefix(id, CheckIDPrefix) {
		return earlierRun{}, refuse(fmt.Errorf("rerun: %s is a dry run that ran no node", id))
	}
	if out.result, err = resultOf(ctx, c, id, runID); err != nil {
		return earlierRun{}, fmt.Errorf("rerun: result of run %s: %w", id, err)
	}
	v, err := c.QueryWorkflow(ctx, id, runID, PlanQuery)
	if err != nil {
		return earlierRun{}, fmt.Errorf("rerun: read the plan of run %s (a worker answers by replaying it; is one running?): %w", id, err)
	}
	if err := v.Get(&out.rawPlan); err != nil {
		return earlierRun{}, fmt.Errorf("rerun: decode the plan of run %s: %w", id, err)
	}
	if len(out.rawPlan) == 0 || string(out.rawPlan) == "null" {
		return earlierRun{}, refuse(fmt.Errorf("rerun: run %s never resolved its pipeline (%s): there is nothing to reuse; start a new run",
			id, cmp.Or(out.result.Error, "no plan")))
	}
	if err := json.Unmarshal(out.rawPlan, &out.plan); err != nil {
		return earlierRun{}, fmt.Errorf("rerun: decode the plan of run %s: %w", id, err)
	}
	return out, nil
}

// startInput reads the input a run was started with from its first
// history event.
func startInput(ctx context.Context, c client.Client, id, runID string) (PipelineInput, error) {
	it := c.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !it.HasNext() {
		return PipelineInput{}, fmt.Errorf("rerun: run %s has no history", id)
	}
	ev, err := it.Next()
	if err != nil {
		return PipelineInput{}, fmt.Errorf("rerun: history of run %s: %w", id, err)
	}
	attrs := ev.GetWorkflowExecutionStartedEventAttributes()
	if attrs == nil || len(attrs.GetInput().GetPayloads()) == 0 {
		return PipelineInput{}, fmt.Errorf("rerun: run %s has no start input", id)
	}
	var in PipelineInput
	if err := converter.GetDefaultDataConverter().FromPayload(attrs.GetInput().GetPayloads()[0], &in); err != nil {
		return PipelineInput{}, fmt.Errorf("rerun: start input of run %s: %w", id, err)
	}
	return in, nil
}

// checkFrom refuses a From node the earlier run's pipeline lacks.
func checkFrom(plan planNodes, run string, from []string) error {
	ids := make([]string, len(plan.Nodes))
	for i, n := range plan.Nodes {
		ids[i] = n.ID
	}
	for _, f := range from {
		if !slices.Contains(ids, f) {
			return fmt.Errorf("rerun: --from %q: run %s's pipeline has no node %q (its nodes: %s)", f, run, f, strings.Join(ids, ", "))
		}
	}
	return nil
}
