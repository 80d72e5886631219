package workflows

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/activities"
	"github.com/retrain-ml/retrain/features"
)

// promoteFakes stands in for the lake: the first commit loses a race, so
// the workflow must plan and run the buckets again.
type promoteFakes struct {
	mu        sync.Mutex
	plans     []string // promotion ids planned
	buckets   map[string][][]int
	commits   int
	conflicts int // commits to report as conflicts
}

func (f *promoteFakes) plan(_ context.Context, in activities.PromotePlanInput) (*features.PromotionPlan, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if in.With["training_table"] == "ml.missing" {
		return nil, activities.Permanent(activities.ErrBadInput, "training table ml.missing does not exist")
	}
	f.plans = append(f.plans, in.ID)
	return &features.PromotionPlan{ID: in.ID, BaseSnapshot: int64(100 + len(f.plans)), Groups: [][]int{{0, 1}, {2}, {3}}, Columns: []string{"f"}, Partitions: 8}, nil
}

func (f *promoteFakes) bucket(_ context.Context, in activities.PromoteBucketsInput) (features.BucketResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.buckets[in.Plan.ID] = append(f.buckets[in.Plan.ID], in.Buckets)
	return features.BucketResult{URI: "file:///pending/" + in.Plan.ID, Buckets: in.Buckets, Rows: 10, Matched: 9}, nil
}

func (f *promoteFakes) commit(_ context.Context, in activities.PromoteCommitInput) (features.CommitResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.commits++
	if len(in.Results) != len(in.Plan.Groups) {
		return features.CommitResult{}, temporal.NewNonRetryableApplicationError("missing bucket results", "Bug", nil)
	}
	if f.commits <= f.conflicts {
		return features.CommitResult{Conflict: true, Reason: "moved"}, nil
	}
	return features.CommitResult{PreviousSnapshot: in.Plan.BaseSnapshot, Snapshot: 999, Files: 3}, nil
}

func runPromote(t *testing.T, f *promoteFakes, with map[string]any) (activities.NodeResult, error) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(PromoteFeatures, workflow.RegisterOptions{Name: activities.PromoteWorkflow})
	env.RegisterActivityWithOptions(f.plan, activity.RegisterOptions{Name: activities.PromotePlanActivity})
	env.RegisterActivityWithOptions(f.bucket, activity.RegisterOptions{Name: activities.PromoteBucketsActivity})
	env.RegisterActivityWithOptions(f.commit, activity.RegisterOptions{Name: activities.PromoteCommitActivity})
	env.ExecuteWorkflow(activities.PromoteWorkflow, activities.NodeInput{Pipeline: "p", RunID: "run-1", Node: "promote", With: with})
	if !env.IsWorkflowCompleted() {
		t.Fatal("workflow did not complete")
	}
	var res activities.NodeResult
	err := env.GetWorkflowError()
	if err == nil {
		err = env.GetWorkflowResult(&res)
	}
	return res, err
}

// TestPromoteRedoesAfterConflict: a commit that lost the race is not an
// error; the promotion is planned again (a new promotion id) and every
// bucket group rerun, once per round.
func TestPromoteRedoesAfterConflict(t *testing.T) {
	f := &promoteFakes{buckets: map[string][][]int{}, conflicts: 1}
	res, err := runPromote(t, f, map[string]any{"training_table": "ml.training"})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.plans) != 2 || f.plans[0] == f.plans[1] || f.commits != 2 {
		t.Fatalf("plans %v, commits %d", f.plans, f.commits)
	}
	for _, id := range f.plans {
		if got := len(f.buckets[id]); got != 3 {
			t.Errorf("round %s ran %d bucket groups, want 3", id, got)
		}
	}
	out := res.Outputs
	if out["rounds"] != float64(2) || out["snapshot_id"] != "999" || out["previous_snapshot_id"] != "102" || out["rows"] != float64(30) {
		t.Errorf("outputs %v", out)
	}
}

func TestPromoteGivesUpAfterMaxRounds(t *testing.T) {
	f := &promoteFakes{buckets: map[string][][]int{}, conflicts: 100}
	_, err := runPromote(t, f, map[string]any{"training_table": "ml.training"})
	if err == nil || !strings.Contains(err.Error(), "lost the race") || f.commits != features.MaxRounds {
		t.Errorf("err %v after %d commits", err, f.commits)
	}
}

func TestPromoteBadInputIsNotRetried(t *testing.T) {
	f := &promoteFakes{buckets: map[string][][]int{}}
	_, err := runPromote(t, f, map[string]any{"training_table": "ml.missing"})
	var appErr *temporal.ApplicationError
	if err == nil || !strings.Contains(err.Error(), "ml.missing does not exist") {
		t.Fatalf("err %v", err)
	}
	if !errors.As(err, &appErr) || appErr.Type() != activities.ErrBadInput || !appErr.NonRetryable() {
		t.Fatalf("error %v: want a non-retryable %s", err, activities.ErrBadInput)
	}
	// stepError names the step, states the type once, and keeps the
	// activity's failure as its cause.
	if got, want := appErr.Message(), "plan: training table ml.missing does not exist"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	var actErr *temporal.ActivityError
	var cause *temporal.ApplicationError
	if !errors.As(appErr.Unwrap(), &actErr) || !errors.As(actErr, &cause) || cause.Type() != activities.ErrBadInput {
		t.Errorf("cause of %v: want the plan activity's %s failure", appErr, activities.ErrBadInput)
	}
}
