// Package workflows holds retrain's Temporal workflows: Pipeline, the DAG
// interpreter, and the sub-workflows node types fan out to. Workflow code
// here is deterministic and thin: it decides what runs when, and the
// activities do the work.
package workflows

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
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
	resolved, err := resolve(ctx, in)
	if err != nil {
		return run.invalid(ctx, in, unwrapActivity(err))
	}
	run.start(resolved.Plan)
	if err := run.setRunValues(start); err != nil {
		return run.invalid(ctx, in, err)
	}
	run.reportURL = resolved.ReportURL
	run.showDetails(ctx)
	if resolved.SearchAttributes {
		if err := workflow.UpsertTypedSearchAttributes(ctx, run.searchAttributes(resolved)...); err != nil {
			workflow.GetLogger(ctx).Warn("cannot set search attributes", "error", err)
		}
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

	edges     dags.Edges     // the plan's needs, by position in plan.Nodes and result.Nodes
	index     map[string]int // node id -> position (edges.Index)
	waiting   map[string]int // node id -> needs not yet succeeded
	outputs   map[string]map[string]any
	completed []string         // succeeded node ids, in completion order
	instances []runs.NodeState // foreach instances listed in the result (foreach.go)
}

func (r *pipelineRun) start(plan *dags.Plan) {
	r.plan = plan
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
		if len(r.edges.Needs[i]) == 0 {
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
			selector.AddFuture(r.execute(ctx, node, with), func(f workflow.Future) {
				running--
				var res nodetype.Result
				if err := f.Get(ctx, &res); err != nil {
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
		reason := "not started: the run failed"
		if temporal.IsCanceledError(firstErr) {
			reason = "not started: the run was cancelled"
		}
		for i := range r.result.Nodes {
			if r.result.Nodes[i].Status == runs.NodePending {
				r.result.Nodes[i].Status, r.result.Nodes[i].Reason = runs.NodeCancelled, reason
			}
		}
	}
	return firstErr
}

// nodeWith is a node's resolved `with` and where in it the spec's own
// ${secret.NAME} references are (dags.SecretRef): the only ones the
// worker resolves.
type nodeWith struct {
	values  map[string]any
	secrets []dags.SecretRef
}

// prepare evaluates a node's `when` and resolves its `with` references.
func (r *pipelineRun) prepare(node dags.PlanNode) (with nodeWith, run bool, err error) {
	if node.Foreach != nil {
		return nodeWith{}, true, nil // each instance is prepared by itself (foreach.go)
	}
	return prepareNode(node, r.scope())
}

// prepareNode evaluates a node's `when` and resolves its `with` against sc.
func prepareNode(node dags.PlanNode, sc dags.Scope) (_ nodeWith, run bool, err error) {
	defer guardEval(&err) // a panic or a value too large fails the node, not the workflow task (taskguard.go)
	if node.When != "" {
		ok, err := dags.EvalWhen(node.When, sc)
		if err != nil {
			return nodeWith{}, false, fmt.Errorf("when %q: %w", node.When, err)
		}
		if !ok {
			return nodeWith{}, false, nil
		}
	}
	if len(node.With) == 0 {
		return nodeWith{}, true, nil
	}
	v, secrets, err := dags.InterpolateSecrets(node.With, sc)
	if err != nil {
		return nodeWith{}, false, fmt.Errorf("with: %w", err)
	}
	with, ok := v.(map[string]any)
	if !ok {
		return nodeWith{}, false, fmt.Errorf("with resolved to %T, want a mapping", v)
	}
	// A reference keeps its value's type; convert it to the field's type
	// here, so a mismatch fails the node before its activity is scheduled.
	// A plan recorded without field types converts nothing, as before.
	if with, err = dags.ConvertWith(node.Fields, node.With, with); err != nil {
		return nodeWith{}, false, err
	}
	return nodeWith{values: with, secrets: secrets}, true, nil
}

// execute starts a node as an activity or a child workflow; a foreach
// node, as its instances (foreach.go).
func (r *pipelineRun) execute(ctx workflow.Context, node dags.PlanNode, with nodeWith) workflow.Future {
	if node.Foreach != nil {
		return r.runForeach(ctx, node)
	}
	return startNode(ctx, r.plan.Pipeline, r.result.ID, node, node.ID, with)
}

// startNode starts one node, or one instance of a foreach node (id is
// then ID[i]), as an activity or a child workflow.
func startNode(ctx workflow.Context, pipeline, runID string, node dags.PlanNode, id string, with nodeWith) workflow.Future {
	secrets := with.secrets
	if secrets == nil {
		secrets = []dags.SecretRef{} // sent as []: none, as opposed to a legacy input's absent record
	}
	in := nodetype.Input{Pipeline: pipeline, RunID: runID, Node: id, Type: node.Type, With: with.values, Secrets: secrets}
	retry := nodetype.RetryPolicy(node.Retry)
	if node.Kind == dags.KindWorkflow {
		// The child schedules activities of its own: they run on the
		// node's options, as an activity node's one activity does.
		in.Options = &nodetype.Options{Timeout: node.Timeout, Heartbeat: node.Heartbeat, Retry: node.Retry}
		cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
			WorkflowID:         runID + "/" + id,
			TaskQueue:          node.Queue,
			WorkflowRunTimeout: node.Timeout,
			// One run: the child's activities already retry under the
			// node's policy (Options above), and retrying the child too
			// would multiply the attempts (3 x 3 for max_attempts 3).
			RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
			// User metadata: the UI names the child by its node, not its type.
			StaticSummary: id,
			StaticDetails: fmt.Sprintf("node %s (%s) of run %s", id, node.Type, runID),
		})
		return workflow.ExecuteChildWorkflow(cctx, node.Target, in)
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		ActivityID:          id,
		TaskQueue:           node.Queue,
		StartToCloseTimeout: node.Timeout,
		HeartbeatTimeout:    node.Heartbeat,
		RetryPolicy:         retry,
		// Wait for the activity to acknowledge cancellation so that a
		// cancelled command's process group is gone before the run ends.
		WaitForCancellation: true,
		// The UI's timeline shows the summary instead of the activity type,
		// so five command nodes read as their ids. User metadata only:
		// replay does not compare it.
		Summary: id,
	})
	return workflow.ExecuteActivity(actx, node.Target, in)
}

// succeed records a node's result and makes its outputs referable.
func (r *pipelineRun) succeed(state *runs.NodeState, res nodetype.Result) {
	applyResult(state, res)
	if res.Outputs == nil {
		res.Outputs = map[string]any{}
	}
	r.outputs[state.ID] = res.Outputs
	r.completed = append(r.completed, state.ID)
}

func applyResult(state *runs.NodeState, res nodetype.Result) {
	state.Status = runs.NodeSucceeded
	state.Attempts = res.Attempt
	started, ended := res.StartedAt, res.EndedAt
	state.StartedAt, state.EndedAt = &started, &ended
	state.Outputs = res.Outputs
}

// checkOutputs checks a succeeded node's outputs against those its spec
// declared (dags.CheckOutputs). A node without a declaration, which is
// every node of a plan recorded before declarations existed, passes
// unchecked, so replaying those runs makes the same decisions. A mismatch
// is not retried: the same program gives the same outputs.
func checkOutputs(node dags.PlanNode, res nodetype.Result) error {
	if len(node.Outputs) == 0 || (node.Foreach != nil && res.Outputs[dags.ForeachItems] != nil) {
		return nil
	}
	if err := dags.CheckOutputs(node.Outputs, res.Outputs); err != nil {
		return temporal.NewNonRetryableApplicationError(err.Error(), errtype.BadOutput, nil)
	}
	return nil
}

// rejectOutputs fails a node whose activity succeeded with outputs its
// declaration refuses. The state keeps the attempt, its times and the
// outputs, to show what came; the outputs are not referable, and the
// node is not compensated, as it did not complete.
func (r *pipelineRun) rejectOutputs(state *runs.NodeState, res nodetype.Result, err error) {
	applyResult(state, res)
	state.Status, state.Error = runs.NodeFailed, err.Error()
}

func (r *pipelineRun) fail(ctx workflow.Context, state *runs.NodeState, attempts int32, err error) {
	failState(ctx, state, attempts, err)
}

// skip marks a node skipped, and with it every node downstream of it.
func (r *pipelineRun) skip(id, reason string) {
	state := &r.result.Nodes[r.index[id]]
	if state.Status != runs.NodePending {
		return
	}
	state.Status, state.Reason = runs.NodeSkipped, reason
	for _, dep := range r.dependents(id) {
		r.skip(dep, fmt.Sprintf("upstream node %s was skipped", id))
	}
}

// compensate runs the on_failure nodes of every completed node, newest
// completion first, on a context that survives the run's cancellation.
// A failed compensation is reported and the others still run: leaving one
// thing half-undone is better than leaving everything undone.
func (r *pipelineRun) compensate(ctx workflow.Context) {
	if len(r.plan.OnFailure) == 0 || len(r.completed) == 0 {
		return
	}
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	for i := len(r.completed) - 1; i >= 0; i-- {
		for _, node := range r.plan.OnFailure {
			if node.Compensates != r.completed[i] {
				continue
			}
			// Recorded before it runs, so the state query shows it running.
			r.result.Compensations = append(r.result.Compensations,
				runs.NodeState{ID: node.ID, Type: node.Type, Status: runs.NodePending, Compensates: node.Compensates})
			state := &r.result.Compensations[len(r.result.Compensations)-1]
			with, runIt, err := r.prepare(node)
			switch {
			case err != nil:
				r.fail(dctx, state, 0, err)
			case !runIt:
				state.Status, state.Reason = runs.NodeSkipped, fmt.Sprintf("when %q is false", node.When)
			default:
				now := workflow.Now(dctx)
				state.Status, state.ScheduledAt = runs.NodeRunning, &now
				f := r.execute(dctx, node, with)
				r.showDetails(dctx)
				var res nodetype.Result
				if err := f.Get(dctx, &res); err != nil {
					r.fail(dctx, state, attemptsOf(err, node), unwrapActivity(err))
				} else if err := checkOutputs(node, res); err != nil {
					r.rejectOutputs(state, res, err)
				} else {
					applyResult(state, res)
				}
			}
		}
	}
}

// finish sets the final status and returns the workflow's result: the
// runs.Result on success, or an error carrying the runs.Result as details so clients
// still get every node's state while Temporal shows the run as failed.
func (r *pipelineRun) finish(ctx workflow.Context, runErr error) (*runs.Result, error) {
	defer r.showDetails(ctx)
	now := workflow.Now(ctx)
	r.result.EndedAt = &now
	r.result = r.view()
	r.instances = nil
	if runErr == nil {
		r.result.Status = runs.StatusSucceeded
		return &r.result, nil
	}
	r.result.Status, r.result.Error = runs.StatusFailed, runErr.Error()
	if temporal.IsCanceledError(runErr) {
		r.result.Status, r.result.Error = runs.StatusCancelled, "run cancelled"
	}
	for _, c := range r.result.Compensations {
		if c.Status == runs.NodeFailed {
			r.result.Error += fmt.Sprintf("; compensation %s failed: %s", c.ID, c.Error)
		}
	}
	if r.result.Status == runs.StatusCancelled && ctx.Err() != nil {
		return &r.result, temporal.NewCanceledError(r.result)
	}
	return nil, temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("pipeline %s %s: %s", r.result.Pipeline, r.result.Status, r.result.Error),
		errtype.PipelineFailed, nil, r.result)
}

// labelInvalidVersion guards the search attribute upsert of a run that
// failed validation: histories recorded before it have no upsert there.
const labelInvalidVersion = "label-invalid-runs"

// invalid ends a run whose spec could not be resolved. A spec or params
// that did not validate fail the run with error type InvalidPipeline
// (details: the runs.Result), after labelling it with the pipeline it asked
// for, so `RetrainPipeline = "NAME"` finds failed attempts too. Any other
// resolver failure (it timed out, say) is a plain PipelineFailed.
func (r *pipelineRun) invalid(ctx workflow.Context, in runs.PipelineInput, err error) (*runs.Result, error) {
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != errtype.InvalidPipeline {
		return r.finish(ctx, fmt.Errorf("resolve pipeline: %w", err))
	}
	var failure ResolveFailure
	if appErr.HasDetails() {
		_ = appErr.Details(&failure) // none from older workers: the run goes unnamed as before
	}
	if r.result.Pipeline == "" {
		r.result.Pipeline = failure.Pipeline
	}
	if name := label(r.result.Pipeline); name != "" && failure.SearchAttributes &&
		workflow.GetVersion(ctx, labelInvalidVersion, workflow.DefaultVersion, 1) >= 1 {
		if err := workflow.UpsertTypedSearchAttributes(ctx, runs.PipelineKey.ValueSet(name)); err != nil {
			workflow.GetLogger(ctx).Warn("cannot set search attributes", "error", err)
		}
	}
	now := workflow.Now(ctx)
	r.result.EndedAt = &now
	r.result.Status, r.result.Error = runs.StatusFailed, appErr.Message()
	r.showDetails(ctx)
	subject := "pipeline " + r.result.Pipeline
	switch {
	case r.result.Pipeline != "":
	case in.SpecFile != "":
		subject = "spec " + in.SpecFile
	default:
		subject = "the spec"
	}
	return nil, temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("%s is invalid: %s", subject, appErr.Message()), errtype.InvalidPipeline, nil, r.result)
}

// label cuts a pipeline name to what a keyword search attribute holds
// comfortably; the name of a spec that failed validation is unchecked.
func label(name string) string {
	const maxLabel = 200
	if len(name) <= maxLabel {
		return name
	}
	name = name[:maxLabel]
	for !utf8.ValidString(name) {
		name = name[:len(name)-1]
	}
	return name
}

// attemptsOf reports how many attempts a failed node made: the activity
// attaches it to its own errors; a timeout or a retry budget that ran out is
// read from the retry state.
func attemptsOf(err error, node dags.PlanNode) int32 {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.HasDetails() {
		var d nodetype.FailureDetails
		if appErr.Details(&d) == nil && d.Attempt > 0 {
			return d.Attempt
		}
	}
	var actErr *temporal.ActivityError
	if errors.As(err, &actErr) && actErr.RetryState() == enumspb.RETRY_STATE_MAXIMUM_ATTEMPTS_REACHED {
		return int32(node.Retry.MaxAttempts)
	}
	return 1
}

// unwrapActivity drops Temporal's "activity error (type: ..., scheduledEventID:
// ...)" wrapper so messages name the node's own failure.
func unwrapActivity(err error) error {
	var actErr *temporal.ActivityError
	if errors.As(err, &actErr) && actErr.Unwrap() != nil {
		return nodeFailure{actErr.Unwrap()}
	}
	var childErr *temporal.ChildWorkflowExecutionError
	if errors.As(err, &childErr) && childErr.Unwrap() != nil {
		return nodeFailure{childErr.Unwrap()}
	}
	return err
}

// nodeFailure is a node's error as the run reports it. The error a node
// activity (or child workflow) fails with states the whole message and its
// type, and carries the step's own error as its cause, whose text Error()
// would append again, "(type: T, retryable: R)" and all; a nodeFailure
// reads as the message and the type, once. errors.As sees the error.
type nodeFailure struct{ err error }

func (f nodeFailure) Unwrap() error { return f.err }

func (f nodeFailure) Error() string {
	if appErr, ok := f.err.(*temporal.ApplicationError); ok && appErr.Unwrap() != nil && appErr.Type() != "" {
		return fmt.Sprintf("%s (type: %s, retryable: %v)", appErr.Message(), appErr.Type(), !appErr.NonRetryable())
	}
	return f.err.Error()
}
