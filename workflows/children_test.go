package workflows

import (
	"encoding/json"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/nodetype"
	"github.com/retrain-ml/retrain/runs"
)

// runWithChild runs a one-node spec whose node `fan` is a child workflow
// running child, and returns the run's error.
func runWithChild(t *testing.T, nodeYAML string, child func(workflow.Context, nodetype.Input) (nodetype.Result, error)) error {
	t.Helper()
	reg, err := dags.NewRegistry(dags.NodeType{Name: "fanout", OpenWith: true, Kind: dags.KindWorkflow, Target: "TestFanout"})
	if err != nil {
		t.Fatal(err)
	}
	var s testsuite.WorkflowTestSuite
	s.SetLogger(nopLogger{})
	env := s.NewTestWorkflowEnvironment()
	Register(env)
	env.RegisterActivityWithOptions((&Resolver{AllowInlineSpecs: true, Registry: reg}).Resolve, activity.RegisterOptions{Name: runs.ResolveActivity})
	env.RegisterWorkflowWithOptions(child, workflow.RegisterOptions{Name: "TestFanout"})
	spec, _ := json.Marshal("name: children\nnodes:\n  - id: fan\n    type: fanout\n" + nodeYAML)
	env.ExecuteWorkflow(runs.PipelineWorkflow, runs.PipelineInput{Spec: spec, SpecFile: "test.yaml"})
	return env.GetWorkflowError()
}

// TestPipelineSendsNodeOptionsToChildren: a node that runs as a child
// workflow gets its plan node's timeout, heartbeat and retry policy in its
// input, for the activities it schedules.
func TestPipelineSendsNodeOptionsToChildren(t *testing.T) {
	var got *nodetype.Options
	err := runWithChild(t, "    timeout: 7m\n    heartbeat: 20s\n    retry: {max_attempts: 1}\n",
		func(ctx workflow.Context, in nodetype.Input) (nodetype.Result, error) {
			got = in.Options
			return nodetype.Result{Attempt: 1}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Timeout != 7*time.Minute || got.Heartbeat != 20*time.Second || got.Retry.MaxAttempts != 1 {
		t.Errorf("child got options %+v, want the node's 7m, 20s, max_attempts 1", got)
	}
}

// TestChildWorkflowNotRetriedOnTop: a child-workflow node whose activity
// fails runs it per the node's policy at the activity level, not again at
// the workflow level (max_attempts 3 must not become 3 x 3).
func TestChildWorkflowNotRetriedOnTop(t *testing.T) {
	runsOfChild, runsOfActivity := 0, 0
	err := runWithChild(t, "    retry: {max_attempts: 3, initial_interval: 1s}\n",
		func(ctx workflow.Context, in nodetype.Input) (nodetype.Result, error) {
			runsOfChild++
			ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: time.Minute, RetryPolicy: nodetype.RetryPolicy(in.Options.Retry)})
			err := workflow.ExecuteLocalActivity(ctx, func() error {
				runsOfActivity++
				return temporal.NewApplicationError("the bucket join failed", "Flaky")
			}).Get(ctx, nil)
			return nodetype.Result{}, temporal.NewApplicationErrorWithOptions("buckets: the bucket join failed", "Flaky", temporal.ApplicationErrorOptions{Cause: err})
		})
	if err == nil {
		t.Fatal("the run succeeded with a failing child")
	}
	if runsOfChild != 1 || runsOfActivity != 3 {
		t.Errorf("the child workflow ran %d times and its activity %d: want 1 and 3 (its activities retry, not the child)", runsOfChild, runsOfActivity)
	}

	// Nor when the child returns the activity's error as it is.
	runsOfChild, runsOfActivity = 0, 0
	err = runWithChild(t, "    retry: {max_attempts: 3, initial_interval: 1s}\n",
		func(ctx workflow.Context, in nodetype.Input) (nodetype.Result, error) {
			runsOfChild++
			ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: time.Minute, RetryPolicy: nodetype.RetryPolicy(in.Options.Retry)})
			return nodetype.Result{}, workflow.ExecuteLocalActivity(ctx, func() error {
				runsOfActivity++
				return temporal.NewApplicationError("the bucket join failed", "Flaky")
			}).Get(ctx, nil)
		})
	if err == nil || runsOfChild != 1 || runsOfActivity != 3 {
		t.Errorf("child returning its activity's error: ran %d times, activity %d, err %v: want 1, 3 and a failure", runsOfChild, runsOfActivity, err)
	}
}

// TestChildWorkflowOwnFailureRetried: a child that fails retryably on its
// own account (a promotion that kept losing the race for its table: no
// activity at fault) runs again under the node's policy, up to its
// max_attempts; one that fails non-retryably runs once.
func TestChildWorkflowOwnFailureRetried(t *testing.T) {
	for _, c := range []struct {
		name      string
		err       error
		succeedOn int
		want      int
		ok        bool
	}{
		{"contended twice", temporal.NewApplicationError("lost the race 5 times", "PromotionContended"), 3, 3, true},
		{"contended always", temporal.NewApplicationError("lost the race 5 times", "PromotionContended"), 99, 3, false},
		{"bad input", temporal.NewNonRetryableApplicationError("no such table", "BadInput", nil), 99, 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			runsOfChild := 0
			err := runWithChild(t, "    retry: {max_attempts: 3, initial_interval: 1s}\n",
				func(ctx workflow.Context, in nodetype.Input) (nodetype.Result, error) {
					runsOfChild++
					if runsOfChild >= c.succeedOn {
						return nodetype.Result{Attempt: 1}, nil
					}
					return nodetype.Result{}, c.err
				})
			if (err == nil) != c.ok || runsOfChild != c.want {
				t.Errorf("child ran %d times, run error %v: want %d runs and success %v", runsOfChild, err, c.want, c.ok)
			}
		})
	}
}
