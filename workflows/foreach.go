package workflows

import (
	"fmt"
	"slices"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/nodetype"
	"github.com/retrain-ml/retrain/runs"
)

// A foreach node runs one instance per item of its list. The pipeline
// workflow does not schedule the instances itself: it cuts the list into
// chunks of foreachChunkSize and runs each chunk as a ForeachChunk child
// workflow, which schedules the chunk's instances. Each history then
// grows with what it runs, a chunk's with its instances (~4 events each)
// and the pipeline's with its chunks (~10 events each), so a 10,000-item
// foreach stays far inside Temporal's 51,200 events and 50 MB per
// workflow, and no workflow task does work in proportion to the whole
// list. The node's outputs are {items: [each instance's outputs, in item
// order], count: N}; a skipped instance's outputs are {}.

// ForeachChunkWorkflow is the workflow type name of a chunk of instances.
const ForeachChunkWorkflow = "retrain.ForeachChunk"

// foreachStopSignal tells a running chunk to start no more instances: an
// instance of another chunk failed and the node fails fast.
const foreachStopSignal = "foreach-stop"

const (
	foreachChunkSize = 250
	// maxListedInstances bounds the instance states a run's result lists
	// for one foreach node (the result is one payload of at most 2 MiB):
	// all of them up to this many, beyond it only the failed ones.
	maxListedInstances = 1000
)

// ChunkInput is a ForeachChunk's input: instances Offset.. of a node.
type ChunkInput struct {
	Pipeline    string        `json:"pipeline"`
	RunID       string        `json:"run_id"`
	Node        dags.PlanNode `json:"node"`
	Scope       dags.Scope    `json:"scope"` // params and the outputs the node refers to
	Items       []any         `json:"items"`
	Offset      int           `json:"offset"`
	Parallelism int           `json:"parallelism"`
	FailFast    bool          `json:"fail_fast,omitempty"`
}

// ChunkResult is the state of each instance of a chunk, in item order.
// The chunk itself succeeds whatever its instances did.
type ChunkResult struct {
	States []runs.NodeState `json:"states"`
}

// runForeach evaluates a foreach node's list and runs its instances in
// chunks; the future gives the node's nodetype.Result.
func (r *pipelineRun) runForeach(ctx workflow.Context, node dags.PlanNode) workflow.Future {
	future, settable := workflow.NewFuture(ctx)
	sc := r.scope()
	v, err := guarded(func() (any, error) { return dags.Interpolate(node.Foreach.Expr, sc) }) // taskguard.go
	if err != nil {
		settable.SetError(temporal.NewNonRetryableApplicationError(fmt.Sprintf("foreach %s: %v", node.Foreach.Expr, err), "InvalidForeach", nil))
		return future
	}
	items, ok := v.([]any)
	if !ok {
		settable.SetError(temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("foreach %s gave %T, not a list", node.Foreach.Expr, v), "InvalidForeach", nil))
		return future
	}
	base := chunkScope(node, sc)
	started := workflow.Now(ctx) // the node's time spans its instances'
	workflow.Go(ctx, func(ctx workflow.Context) {
		states, err := r.runChunks(ctx, node, items, base)
		r.listInstances(states)
		if err != nil {
			settable.SetError(err)
			return
		}
		outs := make([]any, len(states))
		for i, s := range states {
			outs[i] = map[string]any{}
			if s.Outputs != nil {
				outs[i] = s.Outputs
			}
		}
		settable.SetValue(nodetype.Result{Outputs: map[string]any{dags.ForeachItems: outs, dags.ForeachCount: len(items)}, Attempt: 1,
			StartedAt: started, EndedAt: workflow.Now(ctx)})
	})
	return future
}

// chunkScope is what a chunk's instances resolve references against:
// the params and only the outputs the node refers to.
func chunkScope(node dags.PlanNode, sc dags.Scope) dags.Scope {
	out := sc
	out.Outputs = map[string]map[string]any{}
	refs, _ := dags.Refs(node.With)
	if node.When != "" {
		if w, err := dags.ParseWhen(node.When); err == nil {
			refs = append(refs, w.Refs()...)
		}
	}
	for _, ref := range refs {
		if o, ok := sc.Outputs[ref.Name]; ok && ref.Kind == "nodes" {
			out.Outputs[ref.Name] = o
		}
	}
	return out
}

// runChunks runs the chunks, at most as many at once as keep the node's
// max_parallel instances running, and returns every instance's state.
func (r *pipelineRun) runChunks(ctx workflow.Context, node dags.PlanNode, items []any, sc dags.Scope) ([]runs.NodeState, error) {
	n := len(items)
	states := make([]runs.NodeState, n)
	if n == 0 {
		return states, nil
	}
	maxPar := max(node.Foreach.MaxParallel, 1)
	chunks := (n + foreachChunkSize - 1) / foreachChunkSize
	inflight := min(max((maxPar+foreachChunkSize-1)/foreachChunkSize, 1), chunks)
	per := max(maxPar/inflight, 1)

	sel := workflow.NewSelector(ctx)
	running := map[int]string{} // chunk -> its workflow id, to signal
	next, failed := 0, 0
	var firstErr string
	stop := false
	for {
		for !stop && ctx.Err() == nil && next < chunks && len(running) < inflight {
			k := next
			next++
			lo, hi := k*foreachChunkSize, min((k+1)*foreachChunkSize, n)
			id := fmt.Sprintf("%s/%s[%d:%d]", r.result.ID, node.ID, lo, hi)
			running[k] = id
			cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
				WorkflowID:    id,
				RetryPolicy:   &temporal.RetryPolicy{MaximumAttempts: 1},
				StaticSummary: fmt.Sprintf("%s[%d:%d]", node.ID, lo, hi),
			})
			in := ChunkInput{Pipeline: r.plan.Pipeline, RunID: r.result.ID, Node: node, Scope: sc,
				Items: items[lo:hi], Offset: lo, Parallelism: per, FailFast: node.Foreach.FailFast}
			sel.AddFuture(workflow.ExecuteChildWorkflow(cctx, ForeachChunkWorkflow, in), func(f workflow.Future) {
				delete(running, k)
				var res ChunkResult
				if err := f.Get(ctx, &res); err != nil || len(res.States) != hi-lo {
					if err == nil {
						err = fmt.Errorf("chunk returned %d states for %d items", len(res.States), hi-lo)
					}
					res.States = make([]runs.NodeState, hi-lo)
					for i := range res.States {
						res.States[i] = runs.NodeState{ID: dags.InstanceID(node.ID, lo+i), Type: node.Type}
						failState(ctx, &res.States[i], 0, unwrapActivity(err))
					}
				}
				copy(states[lo:hi], res.States)
				for _, s := range res.States {
					if s.Status == runs.NodeFailed {
						failed++
						if firstErr == "" {
							firstErr = s.ID + ": " + s.Error
						}
					}
				}
				if failed > 0 && node.Foreach.FailFast && !stop {
					stop = true
					for _, cid := range running {
						workflow.SignalExternalWorkflow(ctx, cid, "", foreachStopSignal, nil)
					}
				}
			})
		}
		if len(running) == 0 {
			break
		}
		sel.Select(ctx)
	}
	for k := next; k < chunks; k++ { // never started
		for i := k * foreachChunkSize; i < min((k+1)*foreachChunkSize, n); i++ {
			states[i] = notStarted(ctx, node, i)
		}
	}
	switch {
	case failed > 0:
		return states, fmt.Errorf("%d of %d instances failed; first: %s", failed, n, firstErr)
	case ctx.Err() != nil:
		return states, temporal.NewCanceledError()
	}
	for _, s := range states {
		if s.Status == runs.NodeCancelled {
			return states, temporal.NewCanceledError()
		}
	}
	return states, nil
}

func notStarted(ctx workflow.Context, node dags.PlanNode, i int) runs.NodeState {
	reason := "not started: another instance failed"
	if ctx.Err() != nil {
		reason = "not started: the run was cancelled"
	}
	return runs.NodeState{ID: dags.InstanceID(node.ID, i), Type: node.Type, Status: runs.NodeCancelled, Reason: reason}
}

// listInstances adds a finished foreach node's instances to the run's
// result: all of them, or past maxListedInstances the failed ones.
func (r *pipelineRun) listInstances(states []runs.NodeState) {
	all := len(states) <= maxListedInstances
	listed := 0
	for _, s := range states {
		if listed >= maxListedInstances {
			break
		}
		if all || s.Status == runs.NodeFailed {
			r.instances = append(r.instances, s)
			listed++
		}
	}
}

// view is the run's result with the foreach instances listed after the
// plan's nodes.
func (r *pipelineRun) view() runs.Result {
	res := r.result
	if len(r.instances) > 0 {
		res.Nodes = append(slices.Clip(res.Nodes), r.instances...)
	}
	return res
}

// trimForeachState keeps the result small: a foreach node's state shows
// its instances' outputs only when they are listed too.
func trimForeachState(state *runs.NodeState) {
	if items, ok := state.Outputs[dags.ForeachItems].([]any); ok && len(items) > maxListedInstances {
		state.Outputs = map[string]any{dags.ForeachCount: state.Outputs[dags.ForeachCount]}
	}
}

// ForeachChunk runs instances Offset..Offset+len(Items) of a foreach node,
// Parallelism at a time. It stops starting instances after a failure when
// the node fails fast, or when the pipeline signals foreachStopSignal.
func ForeachChunk(ctx workflow.Context, in ChunkInput) (*ChunkResult, error) {
	node := in.Node
	states := make([]runs.NodeState, len(in.Items))
	for i := range states {
		states[i] = runs.NodeState{ID: dags.InstanceID(node.ID, in.Offset+i), Type: node.Type, Status: runs.NodePending}
	}
	if err := workflow.SetQueryHandler(ctx, runs.StateQuery, func() ([]runs.NodeState, error) { return states, nil }); err != nil {
		return nil, err
	}
	stop := false
	sel := workflow.NewSelector(ctx)
	sel.AddReceive(workflow.GetSignalChannel(ctx, foreachStopSignal), func(c workflow.ReceiveChannel, _ bool) {
		c.Receive(ctx, nil)
		stop = true
	})
	par := max(in.Parallelism, 1)
	running, next := 0, 0
	for {
		for !stop && ctx.Err() == nil && next < len(in.Items) && running < par {
			i := next
			next++
			state := &states[i]
			sc := in.Scope
			sc.Item = &dags.Item{Value: in.Items[i], Index: in.Offset + i}
			with, runIt, err := prepareNode(node, sc)
			if err != nil {
				failState(ctx, state, 0, err)
				stop = stop || in.FailFast
				continue
			}
			if !runIt {
				state.Status, state.Reason = runs.NodeSkipped, fmt.Sprintf("when %q is false", node.When)
				continue
			}
			now := workflow.Now(ctx)
			state.Status, state.ScheduledAt = runs.NodeRunning, &now
			running++
			sel.AddFuture(startNode(ctx, in.Pipeline, in.RunID, in.Scope.Run, node, state.ID, with, nil), func(f workflow.Future) {
				running--
				var res nodetype.Result
				if err := f.Get(ctx, &res); err != nil {
					failState(ctx, state, attemptsOf(err, node), unwrapActivity(err))
					stop = stop || in.FailFast
					return
				}
				if err := checkOutputs(node, res); err != nil {
					applyResult(state, res)
					state.Status, state.Error = runs.NodeFailed, err.Error()
					stop = stop || in.FailFast
					return
				}
				applyResult(state, res)
			})
		}
		if running == 0 && (stop || ctx.Err() != nil || next >= len(in.Items)) {
			break
		}
		sel.Select(ctx)
	}
	for i := next; i < len(states); i++ {
		states[i] = notStarted(ctx, node, in.Offset+i)
	}
	return &ChunkResult{States: states}, nil
}

// failState marks a node (or an instance) failed, or cancelled.
func failState(ctx workflow.Context, state *runs.NodeState, attempts int32, err error) {
	now := workflow.Now(ctx)
	if state.ScheduledAt == nil {
		state.ScheduledAt = &now
	}
	state.StartedAt, state.EndedAt = state.ScheduledAt, &now
	state.Status, state.Attempts, state.Error = runs.NodeFailed, attempts, err.Error()
	if out := failureOutputs(err); out != nil {
		state.Outputs = out
	}
	if temporal.IsCanceledError(err) {
		state.Status, state.Error, state.Reason = runs.NodeCancelled, "", "cancelled while running"
	}
}

// logicalTimeOf is run's ${run.logical_time}, or "" where a chunk was
// started without run values.
func logicalTimeOf(run *dags.RunValues) string {
	if run == nil {
		return ""
	}
	return run.LogicalTime
}

// timezoneOf is run's time zone, or "" where there is none (UTC) or a
// chunk was started without run values.
func timezoneOf(run *dags.RunValues) string {
	if run == nil {
		return ""
	}
	return run.Timezone
}
