package workflows

import (
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
)

// A workflow task that fails is retried by Temporal for as long as the run
// lasts, and a run has no timeout: a panic in workflow code, or a task that
// runs past the SDK's 1 s deadlock detector, repeats on every attempt when
// its input is the same, and the run is stuck until someone terminates it
// (the worker's panic policy is BlockWorkflow, which must stay: a
// non-determinism error after a bad deploy has to wait for the rollback,
// not fail the run). So the interpreter's own evaluation of a run's
// values (params, `when`, `with`, foreach lists) never panics out of the
// workflow task: a panic becomes a failure of the node or of the run, as
// a bad value would. The time such an evaluation can take is bounded by
// dags' limits on what it produces (dags/limits.go).

// guardEval, deferred by an evaluation with a named error result, turns a
// panic into err, and an evaluation stopped at a dags limit into a
// non-retryable BadInput: the same values would stop there again.
func guardEval(err *error) {
	if p := recover(); p != nil {
		*err = temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("evaluating it panicked, a bug in retrain: %v", p), errtype.NodeFailed, nil)
		return
	}
	if *err != nil && errors.Is(*err, dags.ErrTooLarge) {
		*err = temporal.NewNonRetryableApplicationError((*err).Error(), errtype.BadInput, nil)
	}
}

// guarded runs an evaluation under guardEval.
func guarded[T any](eval func() (T, error)) (v T, err error) {
	defer guardEval(&err)
	return eval()
}

// resolveRunParams is dags.ResolveRunParams under guardEval; what fails
// there is the params' fault, so the run fails as InvalidPipeline (at
// once, naming the param and the limit) like params that did not
// validate.
func (r *pipelineRun) resolveRunParams() (params map[string]any, changed bool, err error) {
	type resolved struct {
		params  map[string]any
		changed bool
	}
	out, err := guarded(func() (resolved, error) {
		p, c, err := dags.ResolveRunParams(r.plan.Params, &r.values)
		return resolved{p, c}, err
	})
	if err != nil {
		msg := err.Error()
		var appErr *temporal.ApplicationError
		if errors.As(err, &appErr) {
			msg = appErr.Message()
		}
		return nil, false, temporal.NewNonRetryableApplicationError(msg, errtype.InvalidPipeline, nil,
			ResolveFailure{Pipeline: r.plan.Pipeline})
	}
	return out.params, out.changed, nil
}
