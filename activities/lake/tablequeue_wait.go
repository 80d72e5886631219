package lake

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/nodetype"
)

// promoteQueueChange versions the table queue in PromoteFeatures: runs
// recorded before it plan at once, and replay keeps them so.
const promoteQueueChange = "promote-table-queue"

// EnqueueInput asks a table's queue for a turn.
type EnqueueInput struct {
	Table     string       `json:"table"`
	TaskQueue string       `json:"task_queue"` // where the queue workflow runs if it is not running yet
	Request   QueueRequest `json:"request"`
}

// TableQueueEnqueue signals a table's queue workflow, starting it if it is
// not running, and returns the queue's workflow id. Only an activity may:
// a workflow cannot signal-with-start, nor know the worker's catalog.
func (l *Lake) TableQueueEnqueue(ctx context.Context, in EnqueueInput) (string, error) {
	cat, err := l.Open(ctx)
	if err != nil {
		return "", err
	}
	id := TableQueueID(in.TaskQueue, catalogKey(cat.Config()), in.Table)
	c := activity.GetClient(ctx)
	_, err = c.SignalWithStartWorkflow(ctx, id, queueAcquireSignal, in.Request,
		client.StartWorkflowOptions{ID: id, TaskQueue: in.TaskQueue, StaticSummary: "promotion queue of table " + in.Table},
		TableQueueWorkflow, QueueState{Table: in.Table})
	if err != nil {
		return "", fmt.Errorf("enqueue promotion into %s: %w", in.Table, err)
	}
	return id, nil
}

// waitTurn puts the promotion in its table's queue and blocks until the
// queue grants it, showing whom it waits for on the workflow's page and in
// its log. It returns the function that releases the turn; call it
// whatever happens next (it runs on a disconnected context, so a cancelled
// node releases too). A `with` without a training table is left for the
// plan activity to refuse: no queue then.
func waitTurn(ctx workflow.Context, in nodetype.Input) (func(), error) {
	tbl, _ := in.With["training_table"].(string)
	if tbl == "" {
		return func() {}, nil
	}
	info := workflow.GetInfo(ctx)
	start, _ := in.With["start_date"].(string)
	end, _ := in.With["end_date"].(string)
	req := QueueRequest{
		WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID,
		Label: fmt.Sprintf("run %s node %s", in.RunID, in.Node), Start: start, End: end, Since: workflow.Now(ctx),
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 10 * time.Second, MaximumAttempts: 10},
		Summary:             "queue for table " + tbl,
	})
	var queueID string
	if err := workflow.ExecuteActivity(actx, TableQueueEnqueueActivity, EnqueueInput{Table: tbl, TaskQueue: info.TaskQueueName, Request: req}).Get(ctx, &queueID); err != nil {
		return nil, StepError("queue", err)
	}
	release := func() {
		dctx, cancel := workflow.NewDisconnectedContext(ctx)
		defer cancel()
		// Errors are the queue's to notice: it checks its holders.
		_ = workflow.SignalExternalWorkflow(dctx, queueID, "", queueReleaseSignal, req).Get(dctx, nil)
	}
	notices := workflow.GetSignalChannel(ctx, queueNoticeSignal)
	log := workflow.GetLogger(ctx)
	waited := false
	// The queue orders work; it does not guard it: a commit that loses a
	// race re-plans (features.CommitPromotion). So a turn that never comes
	// (a holder that never releases, or requests a client forged into the
	// queue, which any client may start and signal) delays a promotion by
	// queueMaxWait at most, and it then goes ahead on its own.
	tctx, stopTimer := workflow.WithCancel(ctx)
	defer stopTimer()
	deadline := workflow.NewTimer(tctx, queueMaxWait)
	for {
		var n QueueNotice
		timedOut := false
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(notices, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, &n) })
		sel.AddFuture(deadline, func(workflow.Future) { timedOut = true })
		sel.Select(ctx)
		if err := ctx.Err(); err != nil {
			release()
			return nil, err
		}
		if timedOut {
			workflow.SetCurrentDetails(ctx, fmt.Sprintf("**Promoting into %s** without its turn: waited %s for overlapping promotions; a lost commit re-plans.", tbl, queueMaxWait))
			log.Warn("table queue: turn did not come; going ahead", "table", tbl, "waited", queueMaxWait)
			return release, nil
		}
		if n.Granted {
			if waited {
				workflow.SetCurrentDetails(ctx, fmt.Sprintf("**Promoting into %s**: its turn came after waiting %s.", tbl, workflow.Now(ctx).Sub(req.Since).Round(time.Millisecond)))
				log.Info("table queue: our turn", "table", tbl, "waited", workflow.Now(ctx).Sub(req.Since))
			}
			return release, nil
		}
		if len(n.Ahead) > 0 {
			waited = true
			workflow.SetCurrentDetails(ctx, waitingDetails(tbl, n.Ahead))
			log.Info("table queue: waiting for overlapping promotions", "table", tbl, "ahead", fmt.Sprint(n.Ahead))
		}
	}
}
