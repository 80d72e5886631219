package workflows

import (
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/nodetype"
	"github.com/retrain-ml/retrain/runs"
)

// nodeWith is a node's resolved `with` and where in it the spec's own
// ${secret.NAME} references are (dags.SecretRef): the only ones the
// worker resolves.
type nodeWith struct {
	values  map[string]any
	secrets []dags.SecretRef
}

// prepare evaluates a node's `when` and resolves its `with` references.
func (r *pipelineRun) prepare(node dags.PlanNode) (with nodeWith, run bool, err error) {
	if node.Foreach != nil {
		return nodeWith{}, true, nil // each instance is prepared by itself (foreach.go)
	}
	return prepareNode(node, r.scope())
}

// prepareNode evaluates a node's `when` and resolves its `with` against sc.
func prepareNode(node dags.PlanNode, sc dags.Scope) (_ nodeWith, run bool, err error) {
	defer guardEval(&err) // a panic or a value too large fails the node, not the workflow task (taskguard.go)
	if node.When != "" {
		ok, err := dags.EvalWhen(node.When, sc)
		if err != nil {
			return nodeWith{}, false, fmt.Errorf("when %q: %w", node.When, err)
		}
		if !ok {
			return nodeWith{}, false, nil
		}
	}
	if len(node.With) == 0 {
		return nodeWith{}, true, nil
	}
	v, secrets, err := dags.InterpolateSecrets(node.With, sc)
	if err != nil {
		return nodeWith{}, false, fmt.Errorf("with: %w", err)
	}
	with, ok := v.(map[string]any)
	if !ok {
		return nodeWith{}, false, fmt.Errorf("with resolved to %T, want a mapping", v)
	}
	// A reference keeps its value's type; convert it to the field's type
	// here, so a mismatch fails the node before its activity is scheduled.
	// A plan recorded without field types converts nothing, as before.
	if with, err = dags.ConvertWith(node.Fields, node.With, with); err != nil {
		return nodeWith{}, false, err
	}
	return nodeWith{values: with, secrets: secrets}, true, nil
}

// execute starts a node as an activity or a child workflow; a foreach
// node, as its instances (foreach.go).
func (r *pipelineRun) execute(ctx workflow.Context, node dags.PlanNode, with nodeWith) workflow.Future {
	if node.Foreach != nil {
		return r.runForeach(ctx, node)
	}
	// Plans recorded before caching existed have no Cache: their runs
	// never reach GetVersion, and replay as they ran.
	if node.Cache != nil && workflow.GetVersion(ctx, nodeCacheChange, workflow.DefaultVersion, 1) >= 1 {
		return r.executeCached(ctx, node, with, r.provenance(node)) // cache.go
	}
	return startNode(ctx, r.plan.Pipeline, r.result.ID, &r.values, node, node.ID, with, r.provenance(node))
}

// startNode starts one node, or one instance of a foreach node (id is
// then ID[i]), as an activity or a child workflow. run is the run's
// values (nil where a chunk was started without them).
//
// prov is sent to node types that record provenance; nil for the others.
func startNode(ctx workflow.Context, pipeline, runID string, run *dags.RunValues, node dags.PlanNode, id string, with nodeWith, prov *nodetype.Provenance) workflow.Future {
	in := nodeInput(pipeline, runID, run, node, id, with)
	in.Provenance = prov
	retry := nodetype.RetryPolicy(node.Retry)
	if target, ok := spreadTarget(node, with.values); ok {
		// A node on several hosts: its child workflow forms the gang and
		// retries it under the node's policy itself (a retry is a new
		// gang), so it runs once here. No run recorded before hosts
		// existed takes this branch: its plans have no Hosts.
		in.Options = &nodetype.Options{Timeout: node.Timeout, Heartbeat: node.Heartbeat, Retry: node.Retry, Queue: node.Queue}
		opts := workflow.ChildWorkflowOptions{
			WorkflowID:    runID + "/" + id,
			RetryPolicy:   &temporal.RetryPolicy{MaximumAttempts: 1},
			StaticSummary: id,
			StaticDetails: fmt.Sprintf("node %s (%s) of run %s, across hosts", id, node.Type, runID),
		}
		return workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, opts), target, in)
	}
	if node.Kind == dags.KindWorkflow {
		// The child schedules activities of its own: they run on the
		// node's options, as an activity node's one activity does.
		in.Options = &nodetype.Options{Timeout: node.Timeout, Heartbeat: node.Heartbeat, Retry: node.Retry}
		opts := workflow.ChildWorkflowOptions{
			WorkflowID:         runID + "/" + id,
			TaskQueue:          node.Queue,
			WorkflowRunTimeout: node.Timeout,
			// One run: the child's activities already retry under the
			// node's policy (Options above), and retrying the child too
			// would multiply the attempts (3 x 3 for max_attempts 3).
			// Its own retryable failures are retried by runChild.
			RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
			// User metadata: the UI names the child by its node, not its type.
			StaticSummary: id,
			StaticDetails: fmt.Sprintf("node %s (%s) of run %s", id, node.Type, runID),
		}
		if node.CancelOnClose {
			// Terminating the run (or its timing out) cancels the child
			// rather than killing it, so it can undo what it holds (a
			// canary's traffic). Plans recorded before have no flag.
			opts.ParentClosePolicy = enumspb.PARENT_CLOSE_POLICY_REQUEST_CANCEL
		}
		if workflow.GetVersion(ctx, childRetryChange, workflow.DefaultVersion, 1) >= 1 {
			// The child's own retryable failures are retried (childretry.go).
			return runChild(ctx, opts, node, in)
		}
		return workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, opts), node.Target, in)
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		ActivityID:          id,
		TaskQueue:           node.Queue,
		StartToCloseTimeout: node.Timeout,
		HeartbeatTimeout:    node.Heartbeat,
		RetryPolicy:         retry,
		// Wait for the activity to acknowledge cancellation so that a
		// cancelled command's process group is gone before the run ends.
		WaitForCancellation: true,
		// The UI's timeline shows the summary instead of the activity type,
		// so five command nodes read as their ids. User metadata only:
		// replay does not compare it.
		Summary: id,
	})
	return workflow.ExecuteActivity(actx, node.Target, in)
}

// nodeInput is what a node's activity (or child workflow) is sent.
func nodeInput(pipeline, runID string, run *dags.RunValues, node dags.PlanNode, id string, with nodeWith) nodetype.Input {
	secrets := with.secrets
	if secrets == nil {
		secrets = []dags.SecretRef{} // sent as []: none, as opposed to a legacy input's absent record
	}
	return nodetype.Input{Pipeline: pipeline, RunID: runID, Node: id, Type: node.Type, With: with.values, Secrets: secrets,
		LogicalTime: logicalTimeOf(run), Timezone: timezoneOf(run)}
}

// spreadTarget returns the child workflow a node runs as when its
// resolved `with` asks for more than one host (dags.NodeType.Hosts).
func spreadTarget(node dags.PlanNode, with map[string]any) (string, bool) {
	if node.Hosts == nil {
		return "", false
	}
	switch n := with[node.Hosts.Field].(type) {
	case float64:
		return node.Hosts.Workflow, n > 1
	case int:
		return node.Hosts.Workflow, n > 1
	case int64:
		return node.Hosts.Workflow, n > 1
	}
	return "", false
}

// succeed records a node's result and makes its outputs referable.
func (r *pipelineRun) succeed(state *runs.NodeState, res nodetype.Result) {
	applyResult(state, res)
	if res.Outputs == nil {
		res.Outputs = map[string]any{}
	}
	r.outputs[state.ID] = res.Outputs
	r.completed = append(r.completed, state.ID)
}

func applyResult(state *runs.NodeState, res nodetype.Result) {
	state.Status = runs.NodeSucceeded
	state.Attempts = res.Attempt
	started, ended := res.StartedAt, res.EndedAt
	state.StartedAt, state.EndedAt = &started, &ended
	state.Outputs = res.Outputs
}

// checkOutputs checks a succeeded node's outputs against those its spec
// declared (dags.CheckOutputs). A node without a declaration, which is
// every node of a plan recorded before declarations existed, passes
// unchecked, so replaying those runs makes the same decisions. A mismatch
// is not retried: the same program gives the same outputs.
func checkOutputs(node dags.PlanNode, res nodetype.Result) error {
	if len(node.Outputs) == 0 || (node.Foreach != nil && res.Outputs[dags.ForeachItems] != nil) {
		return nil
	}
	if err := dags.CheckOutputs(node.Outputs, res.Outputs); err != nil {
		return temporal.NewNonRetryableApplicationError(err.Error(), errtype.BadOutput, nil)
	}
	return nil
}

// rejectOutputs fails a node whose activity succeeded with outputs its
// declaration refuses. The state keeps the attempt, its times and the
// outputs, to show what came; the outputs are not referable, and the
// node is not compensated, as it did not complete.
func (r *pipelineRun) rejectOutputs(state *runs.NodeState, res nodetype.Result, err error) {
	applyResult(state, res)
	state.Status, state.Error = runs.NodeFailed, err.Error()
}

func (r *pipelineRun) fail(ctx workflow.Context, state *runs.NodeState, attempts int32, err error) {
	failState(ctx, state, attempts, err)
}

// skip marks a node skipped, and with it every node downstream of it.
func (r *pipelineRun) skip(id, reason string) {
	state := &r.result.Nodes[r.index[id]]
	if state.Status != runs.NodePending {
		return
	}
	state.Status, state.Reason = runs.NodeSkipped, reason
	for _, dep := range r.dependents(id) {
		r.skip(dep, fmt.Sprintf("upstream node %s was skipped", id))
	}
}
