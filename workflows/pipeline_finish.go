package workflows

import (
	"errors"
	"fmt"
	"unicode/utf8"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/nodetype"
	"github.com/retrain-ml/retrain/runs"
)

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
	// A run that failed for its data keeps the DataNotReady error as the
	// cause, so clients can tell "not ready" from "broken" by type.
	var cause error
	if appErr := (*temporal.ApplicationError)(nil); errors.As(runErr, &appErr) && appErr.Type() == errtype.DataNotReady {
		cause = appErr
	}
	return nil, temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("pipeline %s %s: %s", r.result.Pipeline, r.result.Status, r.result.Error),
		errtype.PipelineFailed, cause, r.result)
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
