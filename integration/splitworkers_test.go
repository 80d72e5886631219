package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/runs"
)

// swSlots is each worker's group slots (--activity-concurrency split=N):
// a 2-core host each, as in TestPromoteAcrossWorkers; swGroups the
// split's bucket groups, more than the two workers' slots.
const (
	swSlots  = 2
	swGroups = 8
)

// TestSplitAcrossWorkers splits the same window of the shared lake's
// training table, joining its two staging tables, through real pipeline
// runs on separate `retrain-worker` processes that share the lake (one
// SQLite catalog file, a warehouse on the S3 server) and the object store
// the checkpoints go to:
//
//  1. single: one worker process runs every bucket group; its datasets'
//     checksums are the reference.
//  2. two workers: a second process joins the queue; the history shows
//     groups completed by both, and the checksums are the reference's.
//  3. one killed: the worker that has just started a group is SIGKILLed;
//     that group times out on its heartbeat and is redone by the other
//     worker, and the checksums are the reference's.
func TestSplitAcrossWorkers(t *testing.T) {
	parallelFor(t, 55*time.Second)
	if testing.Short() {
		t.Skip("builds retrain-worker and starts an S3 server and two worker processes")
	}
	// The short form splits half the rows: a group still lasts long
	// enough to be caught running and killed. The long form splits
	// the promotion tests' pwRows.
	rows := int64(pwRows / 2)
	if longTests(t) {
		rows = pwRows
	}
	e := newSharedLakeRows(t, "file:"+filepath.Join(t.TempDir(), "catalog.db"), rows)
	store := e.srv.Open(t, "store")
	bin := treeBinary(t, "./cmd/retrain-worker")
	flags := []string{"--s3-uri", e.srv.URI("store"), "--activity-concurrency", fmt.Sprintf("split=%d", swSlots)}
	a := e.startWorker(t, bin, "A", flags...)

	single := e.split(t, store, "single", swGroups, rows, nil)
	for _, g := range single.groups {
		if g.identity != a.identity {
			t.Fatalf("single: group %v completed by %s, want worker A (%s)", g.buckets, g.identity, a.identity)
		}
	}
	want := single.sums
	t.Logf("single: checksums train %s, eval %s (%d + %d rows)", want[0].Digest, want[1].Digest, want[0].Rows, want[1].Rows)

	b := e.startWorker(t, bin, "B", flags...)
	two := e.split(t, store, "two", swGroups, rows, nil)
	per := two.perWorker()
	if per[a.identity] == 0 || per[b.identity] == 0 {
		t.Errorf("two workers: groups per worker %v: want both A (%s) and B (%s) to take groups", per, a.identity, b.identity)
	}
	wantSums(t, "two workers", two.sums, want)

	var killed killRecord
	three := e.split(t, store, "kill", swGroups, rows, func(ctx context.Context, childID string) {
		killed = e.killOnStartedGroup(t, ctx, childID, split.SplitGroupActivity, a, b)
	})
	wantRedoneBySurvivor(t, three.groups, killed, a, b)
	wantSums(t, "killed", three.sums, want)
	// The history with a group redone replays against this code.
	replayer := sdkworker.NewWorkflowReplayer()
	replayer.RegisterWorkflowWithOptions(split.Split, workflow.RegisterOptions{Name: split.SplitWorkflow})
	if err := replayer.ReplayWorkflowHistory(nil, history(t, tclient, three.childID)); err != nil {
		t.Errorf("replay of the split with a killed worker: %v", err)
	}

	names := map[string]string{a.identity: "A", b.identity: "B"}
	for _, r := range []struct {
		name string
		s    *splitRun
	}{{"single", single}, {"two workers", two}, {"one killed", three}} {
		per := map[string]int{}
		for id, n := range r.s.perWorker() {
			per[names[id]] = n
		}
		t.Logf("%s: %d groups, per worker %v; node %.2f s", r.name, len(r.s.groups), per, r.s.wall.Seconds())
	}
}

func wantSums(t *testing.T, phase string, got, want [2]split.Checksum) {
	t.Helper()
	if got != want {
		t.Errorf("%s: checksums %v, want the single worker's %v", phase, got, want)
	} else {
		t.Logf("%s: checksums equal the single worker's", phase)
	}
}

// splitRun is a split node's run: its groups from its child workflow's
// history, its datasets' checksums and its time.
type splitRun struct {
	childID string
	groups[split.GroupResult]
	sums [2]split.Checksum
	wall time.Duration
}

// split runs a split of the lake's window with both staging tables joined,
// in the given number of bucket groups, through a pipeline run on the
// lake's queue, and checks it wrote the table's rows; during, if set,
// runs while it does, given the split's child workflow id.
func (e *sharedLake) split(t *testing.T, store *s3store.Store, name string, groups int, rows int64, during func(ctx context.Context, childID string)) *splitRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	spec := fmt.Sprintf(`name: split_across_workers_%s
nodes:
  - id: split
    type: split
    heartbeat: %s
    with:
      table: ml.training
      start_date: %q
      end_date: %q
      dense: [u_activity, u_ctr_7d, u_sessions, a_ad_quality, a_ad_ctr_7d]
      sparse: [user_id, ad_id, u_recent_ads]
      max_null_rate: 1
      bucket_groups: %d
      join: [{table: %s}, {table: %s}]
`, name, pwHeartbeat, e.start, e.end, groups, e.staging[0], e.staging[1])
	run, err := runs.Start(ctx, tclient, runs.Request{Spec: []byte(spec), SpecFile: "split_across_workers.yaml", TaskQueue: e.queue})
	if err != nil {
		t.Fatal(err)
	}
	childID := run.ID + "/split"
	if during != nil {
		during(ctx, childID)
	}
	res, err := runs.Wait(ctx, tclient, run.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, runs.StatusSucceeded)
	n := node(t, res, "split")
	s := splitHistory(t, ctx, childID)
	s.childID, s.wall = childID, n.EndedAt.Sub(*n.StartedAt)
	if len(s.groups) != groups {
		t.Fatalf("%s: %d bucket groups completed, want %d", name, len(s.groups), groups)
	}
	var wrote int64
	for _, g := range s.groups {
		wrote += g.res.Train.Rows + g.res.Eval.Rows
	}
	if total := n.Outputs["train_rows"].(float64) + n.Outputs["eval_rows"].(float64); wrote != int64(total) || wrote != rows {
		t.Errorf("%s: groups wrote %d rows, the split says %v, the table has %d", name, wrote, total, rows)
	}
	if !strings.Contains(fmt.Sprint(n.Outputs["summary"]), "bucket join") {
		t.Errorf("%s: summary %v", name, n.Outputs["summary"])
	}
	for i, ds := range []string{split.TrainDataset, split.EvalDataset} {
		if s.sums[i], err = split.DatasetChecksum(ctx, store, n.Outputs["uri"].(string), ds); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// splitHistory reads a split's group activities from its history: the
// worker and attempt that completed each, and its rows.
func splitHistory(t *testing.T, ctx context.Context, childID string) *splitRun {
	t.Helper()
	return &splitRun{groups: groupsOf(t, completedActivities(t, ctx, childID), split.SplitGroupActivity, func(r split.GroupResult) []int { return r.Buckets })}
}
