package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/runs"
)

// resolveWait is how long `retrain run` waits for a worker to resolve a
// named pipeline before it reports the run as submitted but unresolved.
const resolveWait = 10 * time.Second

// resolveOutcome is what `retrain run` learned of a run's resolve step.
type resolveOutcome int

const (
	resolvePending  resolveOutcome = iota // no worker resolved it in time
	resolveResolved                       // the plan is resolved: nodes run
	resolveEnded                          // the run ended after resolving
)

// awaitResolve polls a just-started run until its pipeline is resolved,
// so that `retrain run NAME` with an unknown name or a bad param fails at
// once instead of printing "started". A run the resolver refused ends
// with an InvalidPipeline error, returned here with its message as an
// ExitError. A run nobody has resolved after wait is left alone: the
// workers may just be down.
func awaitResolve(ctx context.Context, c client.Client, id string, wait time.Duration) (resolveOutcome, error) {
	deadline := time.Now().Add(wait)
	for {
		outcome, err := resolveState(ctx, c, id)
		if err != nil || outcome != resolvePending {
			return outcome, err
		}
		if time.Now().After(deadline) {
			return resolvePending, nil
		}
		select {
		case <-ctx.Done():
			return resolvePending, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// resolveState looks at the run once.
func resolveState(ctx context.Context, c client.Client, id string) (resolveOutcome, error) {
	desc, err := c.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return resolvePending, fmt.Errorf("run %s: %w", id, err)
	}
	if desc.GetWorkflowExecutionInfo().GetStatus() != enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
		err := c.GetWorkflow(ctx, id, "").Get(ctx, nil)
		var appErr *temporal.ApplicationError
		if errors.As(err, &appErr) && appErr.Type() == errtype.InvalidPipeline {
			return resolveEnded, &ExitError{Code: 1, Err: fmt.Errorf("run %s: %s", id, appErr.Message())}
		}
		return resolveEnded, nil // it resolved and ran; its result says how it went
	}
	// Only a worker answers a query: bound each one, so a run no worker
	// polls for is noticed by the deadline, not stuck on.
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	v, err := c.QueryWorkflow(qctx, id, "", runs.StateQuery)
	if err != nil {
		return resolvePending, nil // no worker yet, or the first workflow task has not run
	}
	var res runs.Result
	if err := v.Get(&res); err != nil {
		return resolvePending, fmt.Errorf("decode state of run %s: %w", id, err)
	}
	if len(res.Nodes) > 0 {
		return resolveResolved, nil
	}
	return resolvePending, nil
}
