package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/worker"
)

// parallelStageSpec is a pipeline of n stage_features nodes with no
// dependencies, all allowed to run at once, each into its own new staging
// table in a namespace that does not exist yet. The odd nodes run on
// otherQueue. A node that fails is retried (max_attempts 3), so a
// collision shows as a second attempt.
func parallelStageSpec(n int, otherQueue string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: stage_%d_parallel\nparallelism: %d\n", n, n)
	b.WriteString("defaults:\n  retry: {max_attempts: 3, initial_interval: 1s}\nnodes:\n")
	for i := range n {
		feature, keys, align, queue := "features.user_daily", "user_id", "previous_day", ""
		if i%2 == 1 {
			feature, keys, align, queue = "features.ad_daily", "ad_id", "as_of", "\n    queue: "+otherQueue
		}
		fmt.Fprintf(&b, `  - id: stage_%d
    type: stage_features%s
    with: {training_table: ml.training, feature_table: %s, keys: [%s], alignment: %s, start_date: %q, end_date: %q, prefix: p%d_, staging_table: staging.par_%d}
`, i, queue, feature, keys, align, demoStart, demoEnd, i, i)
	}
	return b.String()
}

// TestParallelStagesFirstAttempt runs eight stage_features nodes at once on
// a fresh lake through the real server: four on the test's worker and four
// on a separate worker process, both opening the same SQLite catalog file,
// as `retrain dev`'s worker and a separately started one would. Their
// catalog creates and commits land on the file at about the same time;
// every node must succeed on its first attempt, i.e. no collision cost a
// retry.
func TestParallelStagesFirstAttempt(t *testing.T) {
	const n = 8
	l := newTestLake(t)
	other := newQueue(t)
	startChildWorker(t, other, childLakeEnv+"="+l.dir,
		worker.EnvTrustedQueues+"="+l.queue) // the child runs nodes of the runs on the test's queue
	waitForPoller(t, other)

	res := l.run(t, runs.Request{Spec: []byte(parallelStageSpec(n, other)), SpecFile: "stage_8_parallel.yaml"})
	wantStatus(t, res, runs.StatusSucceeded)
	for i := range n {
		s := node(t, res, fmt.Sprintf("stage_%d", i))
		if s.Status != runs.NodeSucceeded || s.Attempts != 1 {
			t.Errorf("%s: %s after %d attempts (want succeeded on attempt 1): %s", s.ID, s.Status, s.Attempts, s.Error)
		}
		if s.Outputs["rows"] != float64(3000) {
			t.Errorf("%s: staged %v rows, want 3000", s.ID, s.Outputs["rows"])
		}
	}
	// They ran together: count the most stages running at one instant.
	if most := mostAtOnce(res, n); most < 2 {
		t.Errorf("stages ran one at a time (at most %d at once)", most)
	} else {
		t.Logf("at most %d of %d stages ran at once", most, n)
	}
}

// waitForPoller waits until a worker polls queue for activities.
func waitForPoller(t *testing.T, queue string) {
	t.Helper()
	waitFor(t, time.Minute, func() bool {
		resp, err := tclient.DescribeTaskQueue(context.Background(), queue, enumspb.TASK_QUEUE_TYPE_ACTIVITY)
		return err == nil && len(resp.GetPollers()) > 0
	})
}

// mostAtOnce is the most of nodes stage_0..stage_<n-1> that were running
// at one instant.
func mostAtOnce(res *runs.Result, n int) int {
	most := 0
	for i := range n {
		at := res.Node(fmt.Sprintf("stage_%d", i)).StartedAt
		running := 0
		for j := range n {
			s := res.Node(fmt.Sprintf("stage_%d", j))
			if !s.StartedAt.After(*at) && s.EndedAt.After(*at) {
				running++
			}
		}
		most = max(most, running)
	}
	return most
}
