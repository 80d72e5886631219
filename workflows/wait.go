package workflows

import (
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	ready "github.com/retrain-ml/retrain/internal/readiness"
	"github.com/retrain-ml/retrain/nodetype"
	"github.com/retrain-ml/retrain/runs"
)

// checkTimeout bounds one check of a condition (a command condition runs
// for a minute at most, a table scan reads one or two days).
const checkTimeout = 3 * time.Minute

// errDataSkipped ends a wait whose deadline passed with on_deadline: skip.
type errDataSkipped struct{ reason string }

func (e errDataSkipped) Error() string { return e.reason }

// waitFor polls conditions, in order, until each holds. Each one's
// deadline counts from when the wait began; between checks the workflow
// sleeps on a durable timer, so a worker that dies while the run waits
// loses nothing: the next one replays to the same timer. node is the id
// of the node that waits, or "" for the run.
//
// A when_ready run's deadlines count from its latest start instead, when
// that is later than the wait's begin.
//
// It returns nil when every condition held, errDataSkipped when one with
// on_deadline: skip did not by its deadline, and otherwise the error that
// fails the run: DataNotReady at a deadline, BadInput from a check that
// found the condition can never hold.
func (r *pipelineRun) waitFor(ctx workflow.Context, conds []dags.Wait, node string) error {
	begin := workflow.Now(ctx)
	// A when_ready run started before its cron time: its deadlines count
	// from the cron time, so it waits as long past it as a run the cron
	// started would. A wait that begins later counts from its begin, as
	// every wait of other runs does (their latestStart is zero).
	from := begin
	if r.latestStart.After(from) {
		from = r.latestStart
	}
	for _, c := range conds {
		w, err := dags.ResolveWait(c, r.scope())
		if err != nil {
			return typed(temporal.NewNonRetryableApplicationError(fmt.Sprintf("wait_for %s: %v", c.Name(), err), errtype.BadInput, nil))
		}
		deadline := from.Add(w.Deadline)
		for attempt := 0; ; attempt++ {
			obs, err := r.check(ctx, w)
			if err != nil {
				var appErr *temporal.ApplicationError
				if errors.As(err, &appErr) && appErr.NonRetryable() || ctx.Err() != nil {
					r.setWaiting(node, nil)
					if ctx.Err() != nil {
						return temporal.NewCanceledError()
					}
					return typed(temporal.NewNonRetryableApplicationError(appErr.Message(), appErr.Type(), nil))
				}
				// The lake or the store did not answer: that is no
				// verdict on the data. Keep polling to the deadline.
				obs = ready.Observation{Saw: "check failed: " + unwrapActivity(err).Error()}
			}
			now := workflow.Now(ctx)
			if obs.Ready {
				r.recordWait(ctx, "ready", now.Sub(begin))
				r.setWaiting(node, nil)
				r.result.Ready = append(r.result.Ready, readyOf(node, w, obs, now))
				break
			}
			wait := runs.Waiting{Node: node, Condition: w.Name(), Saw: obs.Saw, Since: begin, Deadline: deadline, Checks: attempt + 1}
			left := deadline.Sub(now)
			if left <= 0 {
				r.recordWait(ctx, "not_ready", now.Sub(begin))
				r.setWaiting(node, nil)
				within := formatWait(w.Deadline)
				if from.After(begin) { // a when_ready run that started early
					within += " from its latest start " + from.Format(time.RFC3339)
				}
				msg := fmt.Sprintf("data not ready: wait_for %s did not hold within its deadline %s (%d checks); last check: %s",
					w.Name(), within, attempt+1, obs.Saw)
				if w.OnDeadline == dags.WaitSkip {
					return errDataSkipped{reason: msg}
				}
				return typed(temporal.NewNonRetryableApplicationError(msg, errtype.DataNotReady, nil, wait))
			}
			r.setWaiting(node, &wait)
			r.showDetails(ctx)
			if err := workflow.Sleep(ctx, dags.NextPoll(w.Poll, attempt, left)); err != nil {
				r.setWaiting(node, nil)
				return temporal.NewCanceledError()
			}
		}
	}
	return nil
}

// awaitLatestStart holds a run a when_ready schedule started early whose
// pipeline, as this worker has it, has no wait_for of its own (a worker
// with another copy of the spec than the one applied): with nothing to
// wait for, it starts at its cron time, as a plain schedule's run would,
// not hours early. Other runs have no latest start and go on at once.
func (r *pipelineRun) awaitLatestStart(ctx workflow.Context) error {
	now := workflow.Now(ctx)
	if r.latestStart.IsZero() || !r.latestStart.After(now) {
		return nil
	}
	r.setWaiting("", &runs.Waiting{
		Condition: "latest start " + r.latestStart.Format(time.RFC3339),
		Saw:       fmt.Sprintf("pipeline %s has no wait_for: the run starts at its cron time", r.plan.Pipeline),
		Since:     now, Deadline: r.latestStart,
	})
	r.showDetails(ctx)
	if err := workflow.Sleep(ctx, r.latestStart.Sub(now)); err != nil {
		r.setWaiting("", nil)
		return temporal.NewCanceledError()
	}
	r.setWaiting("", nil)
	r.showDetails(ctx)
	return nil
}

// recordWait records how long a wait took (runs.MetricDataWait); the
// SDK drops what a replay records again.
func (r *pipelineRun) recordWait(ctx workflow.Context, outcome string, d time.Duration) {
	workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"pipeline": r.plan.Pipeline, "outcome": outcome}).
		Timer(runs.MetricDataWait).Record(d)
}

// check runs the readiness activity once. Transient failures get one
// retry here; the polling loop is the retry after that.
func (r *pipelineRun) check(ctx workflow.Context, w dags.Wait) (ready.Observation, error) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: checkTimeout,
		RetryPolicy: &temporal.RetryPolicy{
			MaximumAttempts: 2, InitialInterval: time.Second,
			NonRetryableErrorTypes: []string{errtype.BadInput, errtype.Refused, errtype.NoObjectStore},
		},
		Summary: "wait_for " + w.Name(),
	})
	var obs ready.Observation
	err := workflow.ExecuteActivity(actx, runs.ReadinessActivity, runs.ReadinessCheck{
		Pipeline: r.plan.Pipeline, RunID: r.result.ID, LogicalDate: r.values.LogicalDate, Condition: w,
	}).Get(ctx, &obs)
	return obs, err
}

// setWaiting records (w != nil) or clears what node (or the run) waits
// for, and the run's status with it: waiting while only waits remain.
func (r *pipelineRun) setWaiting(node string, w *runs.Waiting) {
	kept := r.result.Waiting[:0:0]
	for _, x := range r.result.Waiting {
		if x.Node != node {
			kept = append(kept, x)
		}
	}
	if w != nil {
		kept = append(kept, *w)
	}
	r.result.Waiting = kept
	if node != "" {
		if i, ok := r.index[node]; ok && r.result.Nodes[i].Status == runs.NodeWaiting || ok && r.result.Nodes[i].Status == runs.NodeRunning {
			r.result.Nodes[i].Status = runs.NodeRunning
			if w != nil {
				r.result.Nodes[i].Status = runs.NodeWaiting
			}
		}
	}
	if r.result.Status == runs.StatusRunning || r.result.Status == runs.StatusWaiting {
		r.result.Status = runs.StatusRunning
		if len(r.result.Waiting) > 0 && !r.anyNodeRunning() {
			r.result.Status = runs.StatusWaiting
		}
	}
}

func (r *pipelineRun) anyNodeRunning() bool {
	for _, n := range r.result.Nodes {
		if n.Status == runs.NodeRunning {
			return true
		}
	}
	return false
}

func readyOf(node string, w dags.Wait, obs ready.Observation, at time.Time) runs.Ready {
	out := runs.Ready{Node: node, Condition: w.Name(), Saw: obs.Saw, At: at}
	if w.Kind() == "table" {
		out.Table, out.Rows = w.Table, obs.Rows
		out.SnapshotID = strconv.FormatInt(obs.SnapshotID, 10)
	}
	return out
}

// skipRun ends a run whose data was not ready by a skip deadline: every
// node skipped with the reason, and the run completed as skipped.
func (r *pipelineRun) skipRun(ctx workflow.Context, reason string) (*runs.Result, error) {
	for i := range r.result.Nodes {
		if r.result.Nodes[i].Status == runs.NodePending {
			r.result.Nodes[i].Status, r.result.Nodes[i].Reason = runs.NodeSkipped, reason
		}
	}
	res, err := r.finish(ctx, nil)
	if err == nil && res != nil {
		res.Status, res.Error = runs.StatusSkipped, reason
		r.result.Status, r.result.Error = res.Status, res.Error
		r.showDetails(ctx)
	}
	return res, err
}

// pin makes a node that reads a table a wait_for condition saw ready read
// the snapshot the condition saw: a node type with table and snapshot_id
// fields (PlanNode.PinsSnapshot) whose table is that table and whose snapshot_id is not set gets
// it. Rows a writer lands later do not change what the run trains on.
// Runs without wait_for have no Ready entries: nothing changes for them.
func (r *pipelineRun) pin(node dags.PlanNode, with nodeWith) nodeWith {
	if len(r.result.Ready) == 0 || with.values == nil {
		return with
	}
	if !node.PinsSnapshot {
		return with
	}
	if v, set := with.values["snapshot_id"]; set && v != nil && v != "" {
		return with // the spec chose a snapshot
	}
	table, _ := with.values["table"].(string)
	for _, rd := range r.result.Ready {
		if table != "" && rd.Table == table && rd.SnapshotID != "" && (rd.Node == "" || rd.Node == node.ID) {
			with.values = maps.Clone(with.values)
			with.values["snapshot_id"] = rd.SnapshotID
		}
	}
	return with
}

// waitThenExecute is a node with wait_for: it waits for the node's data,
// then runs it. A skip deadline settles the future with errDataSkipped.
func (r *pipelineRun) waitThenExecute(ctx workflow.Context, node dags.PlanNode, with nodeWith) workflow.Future {
	f, set := workflow.NewFuture(ctx)
	workflow.Go(ctx, func(ctx workflow.Context) {
		if err := r.waitFor(ctx, node.WaitFor, node.ID); err != nil {
			set.Set(nil, err)
			return
		}
		var res nodetype.Result
		err := r.execute(ctx, node, r.pin(node, with)).Get(ctx, &res)
		set.Set(res, err)
	})
	return f
}

// typedError carries an application error (its type: DataNotReady,
// BadInput) under its bare message, so the run's error reads as the
// message while clients can still find the type.
type typedError struct{ err *temporal.ApplicationError }

func (e typedError) Error() string { return e.err.Message() }
func (e typedError) Unwrap() error { return e.err }

func typed(err error) error {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return typedError{appErr}
	}
	return err
}

func formatWait(d time.Duration) string { return d.String() }
