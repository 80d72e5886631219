package lake

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/nodetype"
)

// promoteQueueChange versions the table queue in PromoteFeatures: runs
// recorded before it plan at once, and replay keeps them so.
const promoteQueueChange = "promote-table-queue"

// queueAckChange versions the bound on the queue's first answer.
const queueAckChange = "table-queue-ack"

// queueAckWait bounds how long a promotion waits for its queue's first
// answer (its grant, or whom it waits for), which a working queue sends
// within a workflow task or two. A queue that does not answer (flooded
// with signals, or stuck) is not waited for: the promotion goes ahead on
// the commit's compare-and-swap.
const queueAckWait = 20 * time.Second

// queueFallbackChange versions going ahead on the commit's compare-and-swap
// when the promotion cannot enqueue: runs recorded before it failed there.
const queueFallbackChange = "table-queue-cas-fallback"

// EnqueueInput asks a table's queue for a turn.
type EnqueueInput struct {
	Table     string       `json:"table"`
	TaskQueue string       `json:"task_queue"` // where the queue workflow runs if it is not running yet
	Request   QueueRequest `json:"request"`
}

// TableQueueEnqueue signals a table's queue workflow, starting it if it is
// not running, and returns the queue's workflow id. Only an activity may:
// a workflow cannot signal-with-start, nor know the worker's catalog and
// queue key.
//
// It then checks that what it signalled is a queue a retrain worker
// started (its type, and the proof in its input, which only the workers'
// key makes), and fails otherwise: the promotion then goes ahead on the
// commit's compare-and-swap. Every failure is final (no retry): a queue
// that cannot be used now is not waited for.
func (l *Lake) TableQueueEnqueue(ctx context.Context, in EnqueueInput) (string, error) {
	fail := func(format string, args ...any) (string, error) {
		return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), errtype.TableQueueUnavailable, nil)
	}
	cat, err := l.Open(ctx)
	if err != nil {
		// Not its error, which the plan step reports: the queue's
		// errors stay free of anything the catalog's settings hold.
		return fail("the catalog did not open")
	}
	key, source, err := l.queueKeys().get(ctx)
	if err != nil {
		return fail("%v", err)
	}
	l.noteKeySource(source)
	id := tableQueueID(key, in.TaskQueue, cat.Config().Identity().Key(), in.Table)
	c := activity.GetClient(ctx)
	run, err := c.SignalWithStartWorkflow(ctx, id, queueAcquireSignal, in.Request,
		client.StartWorkflowOptions{ID: id, TaskQueue: in.TaskQueue, StaticSummary: "promotion queue of table " + in.Table},
		TableQueueWorkflow, QueueState{Table: in.Table, Proof: queueProof(key, id)})
	if err != nil {
		return fail("enqueue promotion into %s: %v", in.Table, err)
	}
	if err := verifyQueue(ctx, c, key, id, run.GetRunID()); err != nil {
		return fail("queue of %s: %v", in.Table, err)
	}
	return id, nil
}

// verifyQueue reads how run (of workflow id) started and fails unless it
// is a TableQueue whose input holds the proof of id.
func verifyQueue(ctx context.Context, c client.Client, key []byte, id, run string) error {
	it := c.GetWorkflowHistory(ctx, id, run, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !it.HasNext() {
		return fmt.Errorf("workflow %s has no history", id)
	}
	ev, err := it.Next()
	if err != nil {
		return fmt.Errorf("read how workflow %s started: %v", id, err)
	}
	attrs := ev.GetWorkflowExecutionStartedEventAttributes()
	if attrs == nil {
		return fmt.Errorf("workflow %s: first event is %s", id, ev.GetEventType())
	}
	if name := attrs.GetWorkflowType().GetName(); name != TableQueueWorkflow {
		return fmt.Errorf("workflow %s is a %q, not a %s a retrain worker started; ignoring it", id, name, TableQueueWorkflow)
	}
	var st QueueState
	payloads := attrs.GetInput().GetPayloads()
	if len(payloads) != 1 || converter.GetDefaultDataConverter().FromPayload(payloads[0], &st) != nil || !validProof(key, id, st.Proof) {
		return fmt.Errorf("workflow %s was not started by a retrain worker (no valid proof in its input); ignoring it", id)
	}
	return nil
}

// waitTurn puts the promotion in its table's queue and blocks until the
// queue grants it, showing whom it waits for on the workflow's page and in
// its log. It returns the function that releases the turn; call it
// whatever happens next (it runs on a disconnected context, so a cancelled
// node releases too). A `with` without a training table is left for the
// plan activity to refuse: no queue then.
//
// The queue orders work; it does not guard it: a commit that loses a race
// re-plans (features.CommitPromotion). So when the queue cannot be used
// (enqueue failed for any reason, or the workflow under its id is not one
// a retrain worker started), or the turn does not come within
// queueMaxWait, or the queue is full, the promotion goes ahead on the
// commit's compare-and-swap, and note (for the node's outputs) says so.
func waitTurn(ctx workflow.Context, in nodetype.Input) (release func(), note string, err error) {
	tbl, _ := in.With["training_table"].(string)
	if tbl == "" {
		return func() {}, "", nil
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
	log := workflow.GetLogger(ctx)
	goAhead := func(why string) (func(), string, error) {
		note := queueNote(why)
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("**Promoting into %s** without its turn: %s.", tbl, note))
		log.Warn(note, "table", tbl)
		return func() {}, note, nil
	}
	var queueID string
	if err := workflow.ExecuteActivity(actx, TableQueueEnqueueActivity, EnqueueInput{Table: tbl, TaskQueue: info.TaskQueueName, Request: req}).Get(ctx, &queueID); err != nil {
		if ctx.Err() != nil || workflow.GetVersion(ctx, queueFallbackChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
			return nil, "", StepError("queue", err)
		}
		return goAhead("table queue unavailable (" + queueCause(err) + ")")
	}
	release = func() {
		dctx, cancel := workflow.NewDisconnectedContext(ctx)
		defer cancel()
		// Errors are the queue's to notice: it checks its holders.
		_ = workflow.SignalExternalWorkflow(dctx, queueID, "", queueReleaseSignal, req).Get(dctx, nil)
	}
	notices := workflow.GetSignalChannel(ctx, queueNoticeSignal)
	waited := false
	// A turn that never comes (a holder that never releases, or requests
	// a client forged into the queue) delays a promotion by queueMaxWait
	// at most.
	tctx, stopTimer := workflow.WithCancel(ctx)
	defer stopTimer()
	deadline := workflow.NewTimer(tctx, queueMaxWait)
	var ack workflow.Future
	if workflow.GetVersion(ctx, queueAckChange, workflow.DefaultVersion, 1) >= 1 {
		ack = workflow.NewTimer(tctx, queueAckWait)
	}
	answered := false
	for {
		var n QueueNotice
		timedOut, silent := false, false
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(notices, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, &n); answered = true })
		sel.AddFuture(deadline, func(workflow.Future) { timedOut = true })
		if ack != nil && !answered {
			sel.AddFuture(ack, func(workflow.Future) { silent = true })
		}
		sel.Select(ctx)
		if err := ctx.Err(); err != nil {
			release()
			return nil, "", err
		}
		if silent {
			_, note, _ := goAhead(fmt.Sprintf("table queue did not answer within %s", queueAckWait))
			return release, note, nil
		}
		if timedOut {
			_, note, _ := goAhead(fmt.Sprintf("table queue: the turn did not come within %s", queueMaxWait))
			return release, note, nil
		}
		if n.Full {
			// Not in the queue: nothing to release.
			return goAhead(fmt.Sprintf("table queue full (%d promotions)", queueMaxRequests))
		}
		if n.Granted {
			if waited {
				workflow.SetCurrentDetails(ctx, fmt.Sprintf("**Promoting into %s**: its turn came after waiting %s.", tbl, workflow.Now(ctx).Sub(req.Since).Round(time.Millisecond)))
				log.Info("table queue: our turn", "table", tbl, "waited", workflow.Now(ctx).Sub(req.Since))
			}
			return release, "", nil
		}
		if len(n.Ahead) > 0 {
			waited = true
			workflow.SetCurrentDetails(ctx, waitingDetails(tbl, n.Ahead))
			log.Info("table queue: waiting for overlapping promotions", "table", tbl, "ahead", fmt.Sprint(n.Ahead))
		}
	}
}

// queueNote is the sentence a promotion that goes ahead without its turn
// shows in its outputs, page and log.
func queueNote(why string) string {
	return why + ": promoting on the commit's compare-and-swap"
}

// queueCause is why the enqueue failed, in one line: the activity's own
// message without the wrapping that says which activity it was.
func queueCause(err error) string {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return app.Message()
	}
	var timeout *temporal.TimeoutError
	if errors.As(err, &timeout) {
		return "enqueue timed out"
	}
	return err.Error()
}
