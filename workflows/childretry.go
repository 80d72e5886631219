package workflows

import (
	"errors"
	"math"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/nodetype"
)

// childRetryChange versions the retry of child-workflow nodes: runs
// recorded before it started each child once, and replay keeps them so.
const childRetryChange = "child-node-retry"

// runChild runs a child-workflow node under the node's retry policy.
//
// The child is started with a single attempt (see startNode) because its
// activities already retry under the node's policy: retrying the child on
// their exhausted failures would multiply the attempts. But a child can
// also fail retryably on its own account, with no activity at fault: a
// promotion that lost the race for its table MaxRounds times
// (PromotionContended). Such a failure used to end the node on attempt 1
// of 3. It is now retried here, by the Pipeline workflow, with the node's
// backoff, as a fresh run of the child under the same workflow id; the
// node's attempts count the runs.
func runChild(ctx workflow.Context, opts workflow.ChildWorkflowOptions, node dags.PlanNode, in nodetype.Input) workflow.Future {
	f, set := workflow.NewFuture(ctx)
	policy := nodetype.RetryPolicy(node.Retry)
	workflow.Go(ctx, func(ctx workflow.Context) {
		cctx := workflow.WithChildOptions(ctx, opts)
		for attempt := int32(1); ; attempt++ {
			var res nodetype.Result
			err := workflow.ExecuteChildWorkflow(cctx, node.Target, in).Get(ctx, &res)
			if err == nil {
				res.Attempt = max(res.Attempt, attempt)
				set.Set(res, nil)
				return
			}
			delay, again := childRetryDelay(policy, attempt, err)
			if !again {
				set.Set(nil, err)
				return
			}
			workflow.GetLogger(ctx).Info("child node failed retryably; running it again", "node", in.Node, "attempt", attempt, "delay", delay, "error", err)
			if serr := workflow.Sleep(ctx, delay); serr != nil {
				set.Set(nil, err) // cancelled while waiting: the failure stands
				return
			}
		}
	})
	return f
}

// childRetryDelay says whether a child node's failed attempt is retried
// under its policy, and after how long. Only the child's own retryable
// application errors are: not one whose cause is an activity's failure
// (that activity had the node's retries), not a non-retryable one or one
// of a type the policy excludes, not a timeout or a cancellation.
func childRetryDelay(p *temporal.RetryPolicy, attempt int32, err error) (time.Duration, bool) {
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.NonRetryable() || slices.Contains(p.NonRetryableErrorTypes, appErr.Type()) {
		return 0, false
	}
	// An activity's failure anywhere in the chain, returned as it is or
	// wrapped as a cause, had the node's retries already.
	var actErr *temporal.ActivityError
	if errors.As(err, &actErr) {
		return 0, false
	}
	if p.MaximumAttempts > 0 && attempt >= p.MaximumAttempts {
		return 0, false
	}
	if d := appErr.NextRetryDelay(); d > 0 {
		return d, true
	}
	initial := p.InitialInterval
	if initial <= 0 {
		initial = time.Second
	}
	coeff := p.BackoffCoefficient
	if coeff < 1 {
		coeff = 2
	}
	maxDelay := p.MaximumInterval
	if maxDelay <= 0 {
		maxDelay = 100 * initial
	}
	d := time.Duration(float64(initial) * math.Pow(coeff, float64(attempt-1)))
	return min(d, maxDelay), true
}
