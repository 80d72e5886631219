package lake

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/nodetype"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
)

// promoteFakes stands in for the lake: the first commit loses a race, so
// the workflow must plan and run the buckets again.
type promoteFakes struct {
	mu        sync.Mutex
	plans     []string // promotion ids planned
	buckets   map[string][][]int
	commits   int
	conflicts int // commits to report as conflicts

	failBuckets int             // bucket calls to fail (retryably) before any succeeds
	infos       []activity.Info // of every bucket call
}

func (f *promoteFakes) plan(_ context.Context, in PromotePlanInput) (*features.PromotionPlan, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if in.With["training_table"] == "ml.missing" {
		return nil, nodetype.Permanent(errtype.BadInput, "training table ml.missing does not exist")
	}
	f.plans = append(f.plans, in.ID)
	return &features.PromotionPlan{ID: in.ID, BaseSnapshot: int64(100 + len(f.plans)), Groups: [][]int{{0, 1}, {2}, {3}}, Columns: []string{"f"}, Partitions: 8}, nil
}

func (f *promoteFakes) bucket(ctx context.Context, in PromoteBucketsInput) (features.BucketResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.infos = append(f.infos, activity.GetInfo(ctx))
	if f.failBuckets > 0 {
		f.failBuckets--
		return features.BucketResult{}, errors.New("bucket write failed")
	}
	f.buckets[in.Plan.ID] = append(f.buckets[in.Plan.ID], in.Buckets)
	return features.BucketResult{URI: "file:///pending/" + in.Plan.ID, Buckets: in.Buckets, Rows: 10, Matched: 9}, nil
}

func (f *promoteFakes) commit(_ context.Context, in PromoteCommitInput) (features.CommitResult, error) {
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

func runPromote(t *testing.T, f *promoteFakes, with map[string]any) (nodetype.Result, error) {
	t.Helper()
	return runPromoteInput(t, f, nodetype.Input{Pipeline: "p", RunID: "run-1", Node: "promote", With: with})
}

func runPromoteInput(t *testing.T, f *promoteFakes, in nodetype.Input) (nodetype.Result, error) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(PromoteFeatures, workflow.RegisterOptions{Name: PromoteWorkflow})
	env.RegisterActivityWithOptions(f.plan, activity.RegisterOptions{Name: PromotePlanActivity})
	env.RegisterActivityWithOptions(f.bucket, activity.RegisterOptions{Name: PromoteBucketsActivity})
	env.RegisterActivityWithOptions(f.commit, activity.RegisterOptions{Name: PromoteCommitActivity})
	grantAtOnce(env)
	env.ExecuteWorkflow(PromoteWorkflow, in)
	if !env.IsWorkflowCompleted() {
		t.Fatal("workflow did not complete")
	}
	var res nodetype.Result
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
	if !errors.As(err, &appErr) || appErr.Type() != errtype.BadInput || !appErr.NonRetryable() {
		t.Fatalf("error %v: want a non-retryable %s", err, errtype.BadInput)
	}
	// StepError names the step, states the type once, and keeps the
	// activity's failure as its cause.
	if got, want := appErr.Message(), "plan: training table ml.missing does not exist"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	var actErr *temporal.ActivityError
	var cause *temporal.ApplicationError
	if !errors.As(appErr.Unwrap(), &actErr) || !errors.As(actErr, &cause) || cause.Type() != errtype.BadInput {
		t.Errorf("cause of %v: want the plan activity's %s failure", appErr, errtype.BadInput)
	}
}

// TestPromoteRunsOnTheNodesOptions: the node's timeout, heartbeat and
// retry policy, sent by the Pipeline workflow, reach the promotion's
//
//	With max_attempts 1 a bucket group that fails once fails the
//
// node; without options (a run recorded before they were sent) the
// built-in policy retries it and the promotion succeeds.
func TestPromoteRunsOnTheNodesOptions(t *testing.T) {
	in := nodetype.Input{Pipeline: "p", RunID: "run-1", Node: "promote", With: map[string]any{"training_table": "ml.training"},
		Options: &nodetype.Options{Timeout: 7 * time.Minute, Heartbeat: 45 * time.Second,
			Retry: dags.RetryPolicy{MaxAttempts: 1, InitialInterval: time.Second, Backoff: 2, MaxInterval: time.Minute}}}
	f := &promoteFakes{buckets: map[string][][]int{}, failBuckets: 1}
	_, err := runPromoteInput(t, f, in)
	if err == nil || !strings.Contains(err.Error(), "bucket write failed") {
		t.Fatalf("err %v, want the bucket failure", err)
	}
	if len(f.infos) == 0 {
		t.Fatal("no bucket activity ran")
	}
	for _, info := range f.infos {
		if info.Attempt != 1 {
			t.Errorf("bucket activity attempt %d: max_attempts 1 allows no retry", info.Attempt)
		}
		// The node's 45 s heartbeat is capped (promoteHeartbeat).
		if info.StartToCloseTimeout != 7*time.Minute || info.HeartbeatTimeout != PromoteHeartbeat {
			t.Errorf("bucket activity timeouts %v / heartbeat %v, want the node's 7m / the cap %v", info.StartToCloseTimeout, info.HeartbeatTimeout, PromoteHeartbeat)
		}
		if info.RetryPolicy != nil && info.RetryPolicy.MaximumAttempts != 1 {
			t.Errorf("bucket activity retry policy %+v, want max attempts 1", info.RetryPolicy)
		}
	}
	if f.commits != 0 {
		t.Errorf("%d commits after a failed bucket group", f.commits)
	}

	in.Options = nil
	f = &promoteFakes{buckets: map[string][][]int{}, failBuckets: 1}
	if _, err := runPromoteInput(t, f, in); err != nil {
		t.Fatalf("without node options the failed group is retried: %v", err)
	}
	retried := false
	for _, info := range f.infos {
		retried = retried || info.Attempt == 2
	}
	if !retried || f.commits != 1 {
		t.Errorf("without node options: retried %v, commits %d", retried, f.commits)
	}
}

// TestPromoteHeartbeat: a promotion's activities heartbeat from a
// keep-alive, so their timeout only decides how soon a dead worker's group
// moves to another worker: the node's timeout is capped, a disabled one
// gets the cap, and a shorter one is kept.
func TestPromoteHeartbeat(t *testing.T) {
	for _, c := range []struct{ node, want time.Duration }{
		{0, PromoteHeartbeat},
		{-time.Second, PromoteHeartbeat},
		{45 * time.Second, PromoteHeartbeat},
		{time.Hour, PromoteHeartbeat},
		{PromoteHeartbeat, PromoteHeartbeat},
		{10 * time.Second, 10 * time.Second},
		{3 * time.Second, 3 * time.Second},
	} {
		if got := promoteHeartbeat(c.node); got != c.want {
			t.Errorf("node heartbeat %v: activities get %v, want %v", c.node, got, c.want)
		}
		opts := NodeActivityOptions(&nodetype.Options{Timeout: time.Hour, Heartbeat: c.node, Retry: dags.DefaultRetry()})
		if opts.HeartbeatTimeout != c.want {
			t.Errorf("node heartbeat %v: activity options say %v, want %v", c.node, opts.HeartbeatTimeout, c.want)
		}
	}
}

// TestPromoteGroupOnAnotherLake: a bucket group or commit that reaches a
// worker whose lake is not the one the plan was made on fails retryably,
// naming that worker's lake, instead of failing the node as bad input
// (no such table) or making the promotion replan as if it had lost a race
// (a table of the same name at other snapshots, as two dev stacks with
// the demo data have).
func TestPromoteGroupOnAnotherLake(t *testing.T) {
	ctx := context.Background()
	open := func(demo bool) *lake.Catalog {
		cat, err := lake.Open(ctx, lake.Config{DataDir: t.TempDir()}, quiet)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cat.Close() })
		if demo {
			cfg := demodata.Config{Rows: 300, Days: 2, Seed: 3, Users: 30, Ads: 10}
			if _, err := demodata.Write(ctx, cat, cfg, demodata.DefaultTables, false, nil); err != nil {
				t.Fatal(err)
			}
		}
		return cat
	}
	planned, other, empty := open(true), open(true), open(false)
	tbl, err := planned.Load(ctx, "ml.training")
	if err != nil {
		t.Fatal(err)
	}
	plan := &features.PromotionPlan{Spec: features.PromoteSpec{Training: "ml.training"}, BaseSnapshot: tbl.CurrentSnapshot().SnapshotID}
	if err := checkPlanLake(ctx, planned, plan); err != nil {
		t.Fatalf("the planner's own lake: %v", err)
	}
	for _, c := range []struct {
		name string
		cat  *lake.Catalog
		want string
	}{
		{"same table name, other snapshots", other, "has no snapshot"},
		{"no such table", empty, "is not in this worker's lake"},
	} {
		err := checkPlanLake(ctx, c.cat, plan)
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		var appErr *temporal.ApplicationError
		if errors.As(err, &appErr) && appErr.NonRetryable() {
			t.Errorf("%s: %v is not retryable; another worker may be configured right", c.name, err)
		}
		if msg := err.Error(); !strings.Contains(msg, c.want) || !strings.Contains(msg, c.cat.Config().String()) {
			t.Errorf("%s: %q, want %q and the worker's lake %q", c.name, msg, c.want, c.cat.Config())
		}
	}
}

// TestPromoteGroupsOnTheirQueue: bucket groups are scheduled on the
// bounded queue below the workflow's (where each worker takes as many as
// its --activity-concurrency allows), the plan and the commit on the
// workflow's own queue.
func TestPromoteGroupsOnTheirQueue(t *testing.T) {
	f := &promoteFakes{buckets: map[string][][]int{}}
	if _, err := runPromote(t, f, map[string]any{"training_table": "ml.training"}); err != nil {
		t.Fatal(err)
	}
	if len(f.infos) != 3 {
		t.Fatalf("%d bucket calls, want 3", len(f.infos))
	}
	// The test environment runs workflows on this queue.
	want := nodetype.BoundedQueue("default-test-taskqueue", PromoteBucketsActivity)
	for _, info := range f.infos {
		if info.TaskQueue != want {
			t.Errorf("bucket group ran from task queue %q, want %q", info.TaskQueue, want)
		}
	}
}

// grantAtOnce stands in for a table queue that grants every turn at once
// (the test environment runs no second workflow); the release is a signal.
func grantAtOnce(env *testsuite.TestWorkflowEnvironment) {
	env.RegisterActivityWithOptions(func(_ context.Context, in EnqueueInput) (string, error) {
		env.SignalWorkflow(queueNoticeSignal, QueueNotice{Granted: true})
		return tableQueueID([]byte("test-key-0123456789"), in.TaskQueue, "test", in.Table), nil
	}, activity.RegisterOptions{Name: TableQueueEnqueueActivity})
	env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, queueReleaseSignal, mock.Anything).Return(nil)
}
