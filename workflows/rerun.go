package workflows

import (
	"cmp"
	"encoding/json"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/runs"
)

// rerunChange marks the histories of reruns, the only runs that take
// over node results (PipelineInput.Reuse): no run recorded before it
// has a Reuse, so none takes this path on replay.
const rerunChange = "rerun-reuse"

// verifyReuseTimeout bounds one check of the outputs a rerun would
// reuse: a few object-store and catalog reads per node.
const verifyReuseTimeout = 2 * time.Minute

// reuse takes over the earlier run's results of the nodes this rerun
// need not run (selectReuse), once VerifyReuseActivity has found that
// what their outputs point to still exists. Each node taken over is
// succeeded, with the earlier run's outputs, attempts and times and
// ReusedFrom set, and counts as completed (its on_failure node undoes
// it if this run fails); every other node says in NotReused why it
// runs. A From node the plan lacks, or an earlier plan that does not
// decode, fails the run as InvalidPipeline before a node runs.
func (r *pipelineRun) reuse(ctx workflow.Context, in *runs.Reuse) error {
	workflow.GetVersion(ctx, rerunChange, workflow.DefaultVersion, 1)
	r.result.ReusedFrom = in.Run
	// The earlier run's results come from the earlier run, read on a
	// worker: a starter's input names the run and nothing more.
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		ActivityID:          "load-rerun-source",
		StartToCloseTimeout: verifyReuseTimeout,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3, NonRetryableErrorTypes: []string{errtype.InvalidPipeline}},
		Summary:             "read the run this rerun reuses",
	})
	var loaded runs.Reuse
	if err := workflow.ExecuteActivity(actx, runs.LoadReuseActivity, in.Run).Get(ctx, &loaded); err != nil {
		return invalidRerun(fmt.Sprintf("rerun of run %s: %v", in.Run, unwrapActivity(err)))
	}
	loaded.Run, loaded.From = in.Run, in.From
	in = &loaded
	var prior dags.Plan
	if err := json.Unmarshal(in.Plan, &prior); err != nil {
		return invalidRerun(fmt.Sprintf("rerun of run %s: its plan does not decode: %v", in.Run, err))
	}
	if prior.Pipeline != r.plan.Pipeline {
		return invalidRerun(fmt.Sprintf("rerun of run %s: it ran pipeline %s, not %s", in.Run, prior.Pipeline, r.plan.Pipeline))
	}
	choices, err := selectReuse(r.plan, &prior, in)
	if err != nil {
		return invalidRerun(fmt.Sprintf("rerun of run %s: %v", in.Run, err))
	}

	// Resolve each candidate's `with` on the earlier outputs of its
	// upstream candidates: the type's check may need it (the table a
	// snapshot id belongs to).
	var checks []runs.ReuseCheck
	for _, n := range r.plan.Nodes {
		c := choices[n.ID]
		if c.reason != "" {
			continue
		}
		r.outputs[n.ID] = outputsOf(c.prior)
		with, runIt, err := prepareNode(n, r.scope())
		switch {
		case err != nil:
			choices[n.ID] = reuseChoice{reason: "its with does not resolve: " + err.Error()}
		case !runIt:
			choices[n.ID] = reuseChoice{reason: fmt.Sprintf("when %q is false now", n.When)}
		default:
			checks = append(checks, runs.ReuseCheck{Node: n.ID, Type: n.Type, With: with.values, Outputs: c.prior.Outputs})
		}
	}
	gone := r.verifyReuse(ctx, checks)

	// Take over in plan order, so a node whose upstream node runs after
	// all (its outputs gone) runs too.
	for i, n := range r.plan.Nodes {
		c := choices[n.ID]
		if c.reason == "" && gone[n.ID] != "" {
			c.reason = gone[n.ID]
		}
		if c.reason == "" {
			for _, j := range r.edges.Needs[i] {
				if up := r.edges.IDs[j]; choices[up].reason != "" {
					c.reason = "upstream node " + up + " runs again"
					break
				}
			}
		}
		choices[n.ID] = c
		state := &r.result.Nodes[i]
		if c.reason != "" {
			delete(r.outputs, n.ID)
			state.NotReused = c.reason
			continue
		}
		taken := *c.prior
		taken.Type, taken.Reason, taken.Error, taken.NotReused = n.Type, "", "", ""
		// The run that computed the result: the earlier run, or the one
		// it took the result over from in turn.
		taken.ReusedFrom = cmp.Or(c.prior.ReusedFrom, in.Run)
		*state = taken
		r.outputs[n.ID] = outputsOf(c.prior)
		r.completed = append(r.completed, n.ID)
		for _, dep := range r.dependents(n.ID) {
			r.waiting[dep]--
		}
	}
	return nil
}

// verifyReuse asks a worker whether what the candidates' outputs point to
// still exists; it returns why, by node, for those whose outputs are
// gone. A check that cannot be made at all reuses nothing: every
// candidate runs, with the reason.
func (r *pipelineRun) verifyReuse(ctx workflow.Context, checks []runs.ReuseCheck) map[string]string {
	if len(checks) == 0 {
		return nil
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		ActivityID:          "verify-reuse",
		StartToCloseTimeout: verifyReuseTimeout,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
		Summary:             "check the outputs this rerun reuses",
	})
	var verdict runs.ReuseVerdict
	if err := workflow.ExecuteActivity(actx, runs.VerifyReuseActivity, checks).Get(ctx, &verdict); err != nil {
		gone := make(map[string]string, len(checks))
		for _, c := range checks {
			gone[c.Node] = "its outputs could not be checked: " + unwrapActivity(err).Error()
		}
		return gone
	}
	return verdict.Gone
}

// outputsOf is a node's outputs as references read them: never nil.
func outputsOf(n *runs.NodeState) map[string]any {
	if n.Outputs == nil {
		return map[string]any{}
	}
	return n.Outputs
}

func invalidRerun(msg string) error {
	return temporal.NewNonRetryableApplicationError(msg, errtype.InvalidPipeline, nil)
}
