// Package workflows holds retrain's Temporal workflows: Pipeline, the DAG
// interpreter, and the sub-workflows node types fan out to. Workflow code
// here is deterministic and thin: it decides what runs when, and the
// activities do the work.
package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/nodetype"
	"github.com/retrain-ml/retrain/runs"
)

// Pipeline runs a pipeline: it resolves the spec into a plan (recorded in
// history, so editing the file never changes a running pipeline), runs every
// ready node up to the plan's parallelism, skips nodes whose `when` is false
// along with their dependents, stops scheduling after a failure, and runs the
// spec's on_failure nodes for completed nodes in reverse completion order.
func Pipeline(ctx workflow.Context, in runs.PipelineInput) (*runs.Result, error) {
	run := &pipelineRun{result: runs.Result{
		ID:        workflow.GetInfo(ctx).WorkflowExecution.ID,
		Pipeline:  in.Pipeline,
		Status:    runs.StatusRunning,
		StartedAt: workflow.Now(ctx),
	}}
	if err := workflow.SetQueryHandler(ctx, runs.StateQuery, func() (runs.Result, error) { return run.view(), nil }); err != nil {
		return nil, err
	}
	if err := workflow.SetQueryHandler(ctx, runs.PlanQuery, func() (*dags.Plan, error) { return run.plan, nil }); err != nil {
		return nil, err
	}

	start, err := runValues(ctx, in) // runvalues.go
	if err != nil {
		return run.invalid(ctx, in, err)
	}
	// Known before the pipeline resolves: a scheduled run whose pipeline
	// does not resolve still reports its nominal date (state and result).
	run.result.LogicalDate = start.values.LogicalDate
	run.result.LogicalTime = start.values.LogicalTime
	resolved, err := resolve(ctx, in)
	if err != nil {
		return run.invalid(ctx, in, unwrapActivity(err))
	}
	run.start(resolved.Plan)
	run.noCache, run.refresh = in.NoCache, in.Refresh
	for _, id := range in.Refresh {
		if _, ok := run.index[id]; !ok {
			return run.finish(ctx, fmt.Errorf("refresh %q: pipeline %s has no such node", id, resolved.Plan.Pipeline))
		}
	}
	if err := run.setRunValues(start); err != nil {
		return run.invalid(ctx, in, err)
	}
	if in.DryRun { // resolved and validated: that was all it asked
		run.result.DryRun = true
		return run.finish(ctx, nil)
	}
	run.result.SpecDigest = resolved.Plan.SpecDigest
	if in.Reuse != nil { // a rerun: take over what it need not run (rerun.go)
		if err := run.reuse(ctx, in.Reuse); err != nil {
			return run.invalid(ctx, in, err)
		}
	}
	run.reportURL = resolved.ReportURL
	run.showDetails(ctx)
	if resolved.SearchAttributes {
		if err := workflow.UpsertTypedSearchAttributes(ctx, run.searchAttributes(resolved)...); err != nil {
			workflow.GetLogger(ctx).Warn("cannot set search attributes", "error", err)
		}
	}

	// Plans recorded before wait_for existed have none: their runs
	// never take this branch and replay as they ran.
	if len(resolved.Plan.WaitFor) > 0 {
		if err := run.waitFor(ctx, resolved.Plan.WaitFor, ""); err != nil {
			var skipped errDataSkipped
			if errors.As(err, &skipped) {
				return run.skipRun(ctx, skipped.reason)
			}
			run.cancelPending(err)
			return run.finish(ctx, err)
		}
		run.showDetails(ctx)
	} else if err := run.awaitLatestStart(ctx); err != nil { // wait.go
		run.cancelPending(err)
		return run.finish(ctx, err)
	}
	runErr := run.runNodes(ctx)
	if runErr != nil {
		run.compensate(ctx)
	}
	return run.finish(ctx, runErr)
}

func resolve(ctx workflow.Context, in runs.PipelineInput) (ResolveOutput, error) {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
	})
	var out ResolveOutput
	err := workflow.ExecuteLocalActivity(lctx, runs.ResolveActivity, ResolveInput{
		Pipeline: in.Pipeline, Spec: in.Spec, SpecFile: in.SpecFile, Params: in.Params, Parallelism: in.Parallelism,
	}).Get(ctx, &out)
	if err == nil && (out.Plan == nil || len(out.Plan.Nodes) == 0) {
		err = errors.New("resolver returned an empty plan")
	}
	return out, err
}

// pipelineRun is the interpreter's state for one run.
type pipelineRun struct {
	plan      *dags.Plan
	result    runs.Result
	reportURL string // template of the report's URL (see ReportURL); empty for none

	values   dags.RunValues // ${run.NAME} (runvalues.go)
	schedule string         // the schedule that started the run, if one did
	// latestStart is a when_ready run's cron time: waits that begin
	// before it count their deadlines from it (wait.go). Zero otherwise.
	latestStart time.Time

	edges     dags.Edges     // the plan's needs, by position in plan.Nodes and result.Nodes
	index     map[string]int // node id -> position (edges.Index)
	waiting   map[string]int // node id -> needs not yet succeeded
	outputs   map[string]map[string]any
	completed []string         // succeeded node ids, in completion order
	instances []runs.NodeState // foreach instances listed in the result (foreach.go)

	noCache bool     // recompute every cached node (cache.go)
	refresh []string // recompute these
	// keys are the content keys of node executions, by node id, which
	// provenance records (nodetype.Origin.Key). The node cache sets them
	// (cache.go); a node without a key is left out.
	keys map[string]string
}

func (r *pipelineRun) start(plan *dags.Plan) {
	r.plan = plan
	r.keys = map[string]string{}
	r.result.Pipeline = plan.Pipeline
	r.result.Params = plan.Params
	r.result.ParamsDigest = plan.ParamsDigest
	r.edges = plan.Edges()
	r.index = r.edges.Index
	r.waiting = make(map[string]int, len(plan.Nodes))
	r.outputs = make(map[string]map[string]any, len(plan.Nodes))
	r.result.Nodes = make([]runs.NodeState, len(plan.Nodes))
	for i, n := range plan.Nodes {
		r.waiting[n.ID] = len(r.edges.Needs[i])
		r.result.Nodes[i] = runs.NodeState{ID: n.ID, Type: n.Type, Status: runs.NodePending}
	}
}

// dependents returns the ids of the nodes that need id, in plan order.
func (r *pipelineRun) dependents(id string) []string {
	deps := r.edges.Dependents[r.index[id]]
	out := make([]string, len(deps))
	for k, j := range deps {
		out[k] = r.edges.IDs[j]
	}
	return out
}

func (r *pipelineRun) scope() dags.Scope {
	return dags.Scope{Params: r.plan.Params, Outputs: r.outputs, Run: &r.values}
}

// runNodes is the scheduling loop. It returns the first node failure, or
// the cancellation, after every running node has ended.
func (r *pipelineRun) runNodes(ctx workflow.Context) error {
	var ready []string
	for i, n := range r.plan.Nodes {
		// Nodes a rerun took over are succeeded and have counted down
		// their dependents' waits (rerun.go); in any other run every
		// node is pending and waits for all its needs.
		if r.waiting[n.ID] == 0 && r.result.Nodes[i].Status == runs.NodePending {
			ready = append(ready, n.ID)
		}
	}
	parallelism := max(r.plan.Parallelism, 1)
	selector := workflow.NewSelector(ctx)
	running := 0
	var firstErr error

	for {
		for firstErr == nil && ctx.Err() == nil && len(ready) > 0 && running < parallelism {
			id := ready[0]
			ready = ready[1:]
			node := r.plan.Nodes[r.index[id]]
			state := &r.result.Nodes[r.index[id]]

			with, runIt, err := r.prepare(node)
			if err != nil {
				r.fail(ctx, state, 0, err)
				firstErr = fmt.Errorf("node %s: %w", id, err)
				break
			}
			if !runIt {
				r.skip(id, fmt.Sprintf("when %q is false", node.When))
				continue
			}
			now := workflow.Now(ctx)
			state.Status, state.ScheduledAt = runs.NodeRunning, &now
			running++
			fut := r.execute
			if len(node.WaitFor) > 0 { // none in plans recorded before wait_for existed
				fut = r.waitThenExecute // wait.go
			} else {
				with = r.pin(node, with) // wait.go
			}
			selector.AddFuture(fut(ctx, node, with), func(f workflow.Future) {
				running--
				var res nodetype.Result
				err := f.Get(ctx, &res)
				var skipped errDataSkipped
				if errors.As(err, &skipped) {
					state.Status, state.ScheduledAt = runs.NodePending, nil
					r.skip(id, skipped.reason)
					return
				}
				if err != nil {
					attempts := attemptsOf(err, node)
					r.fail(ctx, state, attempts, unwrapActivity(err))
					if firstErr == nil {
						firstErr = fmt.Errorf("node %s: %w", id, unwrapActivity(err))
					}
					return
				}
				if err := checkOutputs(node, res); err != nil {
					r.rejectOutputs(state, res, err)
					if firstErr == nil {
						firstErr = fmt.Errorf("node %s: %w", id, err)
					}
					return
				}
				r.succeed(state, res)
				if node.Foreach != nil {
					trimForeachState(state)
				}
				for _, dep := range r.dependents(id) {
					r.waiting[dep]--
					if r.waiting[dep] == 0 && r.result.Nodes[r.index[dep]].Status == runs.NodePending {
						ready = append(ready, dep)
					}
				}
			})
		}
		if running == 0 {
			break
		}
		if !selector.HasPending() {
			r.showDetails(ctx) // about to block: what queries see until the next event
		}
		selector.Select(ctx)
	}

	if firstErr == nil && ctx.Err() != nil {
		firstErr = temporal.NewCanceledError()
	}
	if firstErr != nil {
		r.cancelPending(firstErr)
	}
	return firstErr
}

// cancelPending marks the nodes that never started, after err ended the run.
func (r *pipelineRun) cancelPending(err error) {
	reason := "not started: the run failed"
	if temporal.IsCanceledError(err) {
		reason = "not started: the run was cancelled"
	}
	for i := range r.result.Nodes {
		if r.result.Nodes[i].Status == runs.NodePending {
			r.result.Nodes[i].Status, r.result.Nodes[i].Reason = runs.NodeCancelled, reason
		}
	}
}
