package split

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/nodetype"
)

// workflowRun is what a Split workflow run in the test environment did.
type workflowRun struct {
	out    map[string]any
	groups []activity.Info // of every group attempt
	plan   *Plan
}

// runWorkflow runs the Split workflow of s in Temporal's test environment
// on input with: the plan, the groups and the manifest as activities.
// failFirst, if set, makes the first attempt of that group fail after it
// wrote its part, as a worker that dies between writing and reporting.
func runWorkflow(t *testing.T, s *Splits, runID string, with map[string]any, failFirst int) (*workflowRun, error) {
	t.Helper()
	var ts testsuite.WorkflowTestSuite
	ts.SetLogger(sdklog.NewStructuredLogger(quiet))
	env := ts.NewTestWorkflowEnvironment()
	r := &workflowRun{}
	var mu sync.Mutex
	env.RegisterWorkflowWithOptions(Split, workflow.RegisterOptions{Name: SplitWorkflow})
	env.RegisterActivityWithOptions(func(ctx context.Context, in nodetype.Input) (*Plan, error) {
		p, err := s.SplitPlan(ctx, in)
		r.plan = p
		return p, err
	}, activity.RegisterOptions{Name: SplitPlanActivity})
	env.RegisterActivityWithOptions(func(ctx context.Context, in GroupInput) (GroupResult, error) {
		info := activity.GetInfo(ctx)
		mu.Lock()
		r.groups = append(r.groups, info)
		mu.Unlock()
		res, err := s.SplitGroup(ctx, in)
		if err == nil && in.Group == failFirst && info.Attempt == 1 {
			return GroupResult{}, errors.New("worker lost after writing its part")
		}
		return res, err
	}, activity.RegisterOptions{Name: SplitGroupActivity})
	env.RegisterActivityWithOptions(s.SplitManifest, activity.RegisterOptions{Name: SplitManifestActivity})
	retry := dags.RetryPolicy{MaxAttempts: 3, InitialInterval: 10 * time.Millisecond, Backoff: 2, MaxInterval: 100 * time.Millisecond}
	in := nodetype.Input{Pipeline: "test", RunID: runID, Node: "split", Type: "split", With: with,
		Options: &nodetype.Options{Timeout: time.Hour, Heartbeat: 10 * time.Second, Retry: retry}}
	env.ExecuteWorkflow(SplitWorkflow, in)
	if !env.IsWorkflowCompleted() {
		t.Fatal("workflow did not complete")
	}
	if err := env.GetWorkflowError(); err != nil {
		return r, err
	}
	var res nodetype.Result
	if err := env.GetWorkflowResult(&res); err != nil {
		return r, err
	}
	r.out = res.Outputs
	return r, nil
}

// joinWith is the `with` block of a split of e's window joining the user
// features.
func (e *joinEnv) joinWith(more map[string]any) map[string]any {
	w := map[string]any{"table": "ml.training", "snapshot_id": strconv.FormatInt(e.base, 10), "start_date": e.windowStart, "end_date": e.windowEnd,
		"dense": e.dense, "sparse": e.sparse, "max_null_rate": 1.0,
		"join": []any{entry(e.user.Staging, e.user.SnapshotID, nil), entry(e.ad.Staging, e.ad.SnapshotID, nil)}}
	for k, v := range more {
		w[k] = v
	}
	return w
}

// TestSplitWorkflowFansOut: the Split workflow plans, writes each bucket
// group as an activity on the bounded group queue and commits the
// manifest; the split has the rows of the split made in one process
// (same checksums, counts, dates and coverage) whatever the number of
// groups, a group redone after its first attempt wrote its part leaves
// none of that part behind, and a rerun reuses the checkpoint without
// running a group.
func TestSplitWorkflowFansOut(t *testing.T) {
	e := newJoinEnv(t)
	ref, err := e.run(t, "one-process", e.base, e.joinWith(nil)["join"].([]any), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := e.sums(t, ref)
	for _, c := range []struct {
		name      string
		groups    any // bucket_groups; nil: one per bucket
		failFirst int
	}{
		{"one per bucket", nil, -1},
		{"three groups, one redone", 3.0, 1},
		{"one group", 1.0, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			more := map[string]any{}
			if c.groups != nil {
				more["bucket_groups"] = c.groups
			}
			runID := strings.ReplaceAll(c.name, " ", "-")
			r, err := runWorkflow(t, e.splits, runID, e.joinWith(more), c.failFirst)
			if err != nil {
				t.Fatal(err)
			}
			if got := e.sums(t, r.out); got != want {
				t.Errorf("checksums %v, want the one-process split's %v", got, want)
			}
			for _, k := range []string{"train_rows", "eval_rows", "train_dates", "eval_dates", "coverage", "schema", "joined", "snapshot_id", "window"} {
				if !sameJSON(r.out[k], ref[k]) {
					t.Errorf("%s: %v, want the one-process split's %v", k, r.out[k], ref[k])
				}
			}
			wantGroups := 16
			if c.groups != nil {
				wantGroups = int(c.groups.(float64))
			}
			if len(r.plan.Groups) != wantGroups {
				t.Errorf("%d groups planned, want %d", len(r.plan.Groups), wantGroups)
			}
			queue := nodetype.BoundedQueue("default-test-taskqueue", SplitGroupActivity)
			attempts := wantGroups
			if c.failFirst >= 0 {
				attempts++
			}
			if len(r.groups) != attempts {
				t.Errorf("%d group attempts, want %d", len(r.groups), attempts)
			}
			// The node's S3 figures add up its steps': every group wrote
			// its part to the store.
			if u, _ := r.out["s3"].(map[string]any); u == nil || u["requests"].(float64) < float64(wantGroups) || u["bytes"].(float64) <= 0 {
				t.Errorf("s3 output %v: want at least a request per group (%d) and some bytes", r.out["s3"], wantGroups)
			}
			for _, info := range r.groups {
				if info.TaskQueue != queue {
					t.Errorf("group ran from task queue %q, want %q", info.TaskQueue, queue)
				}
			}
			// Only the manifest and the files it names are left.
			key := checkpoint.Key{Pipeline: "test", Run: runID, Node: "split"}
			m, err := checkpoint.Load(context.Background(), e.splits.Store, key, r.out["fingerprint"].(string))
			if err != nil {
				t.Fatal(err)
			}
			named := map[string]bool{checkpoint.ManifestKey(key, m.Inputs): true}
			for _, d := range m.Datasets {
				for _, f := range d.Files {
					named[f.Key] = true
				}
			}
			for o, err := range e.splits.Store.List(context.Background(), "checkpoints/test/"+runID+"/") {
				if err != nil {
					t.Fatal(err)
				}
				if !named[o.Key] {
					t.Errorf("%s is left in the checkpoint, named by no manifest", o.Key)
				}
			}
			// A rerun finds the checkpoint in the plan.
			again, err := runWorkflow(t, e.splits, runID, e.joinWith(more), -1)
			if err != nil {
				t.Fatal(err)
			}
			if again.out["reused"] != true || len(again.groups) != 0 || again.out["uri"] != r.out["uri"] {
				t.Errorf("rerun: reused %v, %d group attempts, uri %v; want the checkpoint %v reused and no group run",
					again.out["reused"], len(again.groups), again.out["uri"], r.out["uri"])
			}
		})
	}
}

// TestSplitGroupsKeepStagingBucketsTogether: buckets that read the same
// staging partitions go to one group: with a staging table of 4 buckets
// (16 on the training side) a group holds whole classes b mod 4, at most
// 4 groups; a hash-joined one (5 buckets) makes one group; no join, one
// group per bucket.
func TestSplitGroupsKeepStagingBucketsTogether(t *testing.T) {
	e := newJoinEnv(t)
	e.dense, e.sparse = []any{"u_activity"}, []any{"user_id"}
	plan := func(join []any) *Plan {
		t.Helper()
		w := e.joinWith(nil)
		if join == nil {
			delete(w, "join")
			w["dense"] = []any{"ad_id"}
		} else {
			w["join"] = join
		}
		p, err := e.splits.plan(context.Background(), nodetype.Input{Pipeline: "test", RunID: "plan", Node: "split", Type: "split", With: w})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	four := copyStaging(t, e.cat, e.user.Staging, "ml.copy_4", 4, nil)
	p := plan([]any{entry("ml.copy_4", four, nil)})
	if len(p.Groups) != 4 {
		t.Errorf("16 vs 4 buckets: %d groups %v, want 4", len(p.Groups), p.Groups)
	}
	var all []int
	for _, g := range p.Groups {
		for _, b := range g {
			if b%4 != g[0]%4 {
				t.Errorf("group %v mixes buckets of different staging buckets (mod 4)", g)
			}
		}
		all = append(all, g...)
	}
	slices.Sort(all)
	if len(all) != 16 || all[0] != 0 || all[15] != 15 {
		t.Errorf("groups %v do not cover the 16 buckets once", p.Groups)
	}
	five := copyStaging(t, e.cat, e.user.Staging, "ml.copy_5", 5, nil)
	if p := plan([]any{entry("ml.copy_5", five, nil)}); len(p.Groups) != 1 || len(p.Groups[0]) != 16 {
		t.Errorf("hash join: groups %v, want one of all 16 buckets", p.Groups)
	}
	if p := plan(nil); len(p.Groups) != 16 || p.BucketColumn == "" || p.Joined != nil {
		t.Errorf("no join: groups %v on %q, want one per bucket", p.Groups, p.BucketColumn)
	}
}
