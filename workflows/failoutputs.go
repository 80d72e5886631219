package workflows

import (
	"errors"

	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/errtype"
)

// failureOutputs are the outputs a failed node attached to its error, for
// the run's result and report: a canary that rolled back (or whose
// promotion was refused) says which check breached, its values and every
// step. Other failures carry none.
func failureOutputs(err error) map[string]any {
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || !appErr.HasDetails() {
		return nil
	}
	if t := appErr.Type(); t != errtype.CanaryRolledBack && t != errtype.ConcurrentMove {
		return nil
	}
	var out map[string]any
	if appErr.Details(&out) != nil || out["decision"] == nil {
		return nil // a ConcurrentMove of rollback_model: attempt details only
	}
	return out
}
