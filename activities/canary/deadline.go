package canary

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	lakenode "github.com/retrain-ml/retrain/activities/lake"
	"github.com/retrain-ml/retrain/nodetype"
)

// A canary's time: the node's timeout is its workflow's run timeout, and
// a canary that hit it would be left where it was, serving its share.
// So the workflow keeps its own deadline, the run's end less
// DecisionReserve, and decides (rolls back) when a step or an evaluation
// would pass it; the decision and its webhooks then run in the reserve.

// startReserve is what a canary's timeout must hold beyond its bakes and
// DecisionReserve: registering the candidate and the first split.
const startReserve = 30 * time.Second

// DecisionReserve is the part of a canary node's timeout kept for its
// decision: the registry's moves and the webhooks that tell the serving
// system 0% (or 100%). A tenth of the timeout, from 30 s to 5 min.
func DecisionReserve(timeout time.Duration) time.Duration {
	return min(max(timeout/10, 30*time.Second), 5*time.Minute)
}

// webhookTimeout bounds one webhook call (the deploy's client's).
const webhookTimeout = 10 * time.Second

// webhookBudget is how long the webhooks of a split may take: every
// attempt timing out, with the deploy's backoff (1 s, doubling) between.
func webhookBudget(attempts int) time.Duration {
	attempts = min(max(attempts, 1), 10)
	backoff := time.Duration(1<<(attempts-1)-1) * time.Second
	return time.Duration(attempts)*webhookTimeout + backoff + 5*time.Second
}

// clock is a canary's deadline: zero when it has none (a run recorded
// before it, or a node without a timeout).
type clock struct {
	runEnd   time.Time // when the workflow's run times out
	deadline time.Time // runEnd less DecisionReserve: decide by then
	timeout  time.Duration
}

func newClock(ctx workflow.Context, in nodetype.Input) clock {
	info := workflow.GetInfo(ctx)
	timeout := info.WorkflowRunTimeout
	if timeout <= 0 && in.Options != nil {
		timeout = in.Options.Timeout
	}
	if timeout <= 0 {
		return clock{}
	}
	end := info.WorkflowStartTime.Add(timeout)
	return clock{runEnd: end, deadline: end.Add(-DecisionReserve(timeout)), timeout: timeout}
}

func (c clock) set() bool { return !c.deadline.IsZero() }

// passed reports whether t is at or past the deadline.
func (c clock) passed(t time.Time) bool { return c.set() && !t.Before(c.deadline) }

// why says what the deadline is, for a rollback's reason.
func (c clock) why() string {
	return fmt.Sprintf("its deadline %s UTC is the node's timeout of %s less %s kept to decide and tell serving",
		c.deadline.UTC().Format(time.TimeOnly), c.timeout, DecisionReserve(c.timeout))
}

// bounded are the node's activity options with the activity's attempts
// all ending by until (the deadline, or the run's end for the decision),
// each attempt within attempt; zero times leave the node's options.
func (r *run) bounded(ctx workflow.Context, attempt time.Duration, until time.Time) workflow.Context {
	o := lakenode.NodeActivityOptions(r.in.Options)
	if attempt > 0 && attempt < o.StartToCloseTimeout {
		o.StartToCloseTimeout = attempt
	}
	if r.clock.set() && !until.IsZero() {
		left := until.Sub(workflow.Now(ctx))
		o.ScheduleToCloseTimeout = max(left, time.Second)
		o.StartToCloseTimeout = min(o.StartToCloseTimeout, o.ScheduleToCloseTimeout)
	}
	return workflow.WithActivityOptions(ctx, o)
}

// decideOptions are the decision's: all its attempts within the run's
// time left (less a margin for the workflow to record the result), on
// the node's retry policy.
func (r *run) decideOptions(ctx workflow.Context) workflow.Context {
	if !r.clock.set() {
		return ctx
	}
	o := lakenode.NodeActivityOptions(r.in.Options)
	left := r.clock.runEnd.Add(-3 * time.Second).Sub(workflow.Now(ctx))
	left = max(left, 5*time.Second)
	o.StartToCloseTimeout, o.ScheduleToCloseTimeout = left, left
	if o.RetryPolicy == nil {
		o.RetryPolicy = &temporal.RetryPolicy{}
	}
	return workflow.WithActivityOptions(ctx, o)
}
