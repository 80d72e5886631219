package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/internal/devkit/servingsim"
	"github.com/retrain-ml/retrain/runs"
)

var (
	healthy  = servingsim.Behaviour{CTR: 0.10, Latency: 40 * time.Millisecond}
	ctrDrop  = servingsim.Behaviour{CTR: 0.07, Latency: 40 * time.Millisecond}
	slowAt50 = servingsim.Behaviour{CTR: 0.10, Latency: 40 * time.Millisecond, SlowAbove: 25, SlowLatency: 600 * time.Millisecond}
	unseen   = servingsim.Behaviour{CTR: 0.10, Latency: 40 * time.Millisecond, Label: "model-v2"}
)

// TestCanaryHealthyPromoted: a canary as good as production bakes at 10%
// and 50% and is promoted; the webhook heard each split.
func TestCanaryHealthyPromoted(t *testing.T) {
	parallelFor(t, 21*time.Second)
	e := newCanaryEnv(t, healthy)
	startStoreWorker(t, e.queue, e.srv)
	res := wait(t, e.start(t, "6s"))
	wantStatus(t, res, runs.StatusSucceeded)
	decision, steps, out := canaryOutputs(t, res)
	logSteps(t, steps)
	if decision != "promoted" || len(steps) != 3 || out["moved"] != true {
		t.Fatalf("decision %q after %d steps, outputs %v", decision, len(steps), out)
	}
	e.wantMoves(t, []string{"promote:->v1", "promote:v1->v2"}, []string{"promote:->v2"}, []string{"v1/v2@10", "v1/v2@50", "v2/v2@100"})
}

// TestCanaryCTRDropRolledBack: a canary whose CTR is 30% below
// production's is rolled back at step 1; production never moves, the
// run's on_failure compensation runs, and the worker counts the decision.
func TestCanaryCTRDropRolledBack(t *testing.T) {
	parallel(t)
	e := newCanaryEnv(t, ctrDrop)
	metrics := e.startMetricsWorker(t)
	res, decision, steps, breach := e.runBreached(t)
	if decision != "rolled_back" || len(steps) != 1 || breach["check"] != "ctr" || breach["step"] != 1.0 {
		t.Fatalf("decision %q after %d steps, breach %v", decision, len(steps), breach)
	}
	n := node(t, res, "canary")
	t.Logf("node error: %s", n.Error)
	for _, want := range []string{"check ctr breached at step 1", "serving_clicks_total{version=\"v2\"}", "CanaryRolledBack"} {
		if !strings.Contains(n.Error, want) {
			t.Errorf("node error lacks %q: %s", want, n.Error)
		}
	}
	e.wantMoves(t, []string{"promote:->v1"}, []string{"promote:->v2", "rollback:v2->v1"}, []string{"v1/v2@10", "v1/v1@0"})
	if len(res.Compensations) != 1 || res.Compensations[0].Status != runs.NodeSucceeded {
		t.Errorf("compensations %+v, want undo_prep succeeded", res.Compensations)
	}
	waitFor(t, 15*time.Second, func() bool {
		fams, _ := scrape(t, "http://"+metrics+"/metrics")
		return sum(fams, "retrain_canary_decisions_total", map[string]string{"decision": "rolled_back", "task_queue": e.queue}) == 1
	})
}

// TestCanaryLatencyBreachAtStep2: a canary that is fine at 10% but slow
// at 50% passes step 1 and is rolled back at step 2 on p99 latency.
func TestCanaryLatencyBreachAtStep2(t *testing.T) {
	parallelFor(t, 20*time.Second)
	e := newCanaryEnv(t, slowAt50)
	startStoreWorker(t, e.queue, e.srv)
	_, decision, steps, breach := e.runBreached(t)
	if decision != "rolled_back" || len(steps) != 2 || breach["check"] != "p99_latency" || breach["step"] != 2.0 {
		t.Fatalf("decision %q after %d steps, breach %v", decision, len(steps), breach)
	}
	if s := steps[0].(map[string]any); s["outcome"] != "passed" {
		t.Errorf("step 1 %v, want passed", s["outcome"])
	}
	e.wantMoves(t, []string{"promote:->v1"}, nil, []string{"v1/v2@10", "v1/v2@50", "v1/v1@0"})
}

// TestCanaryNoDataFailsClosed: the canary's series are not where the
// query looks (the serving system labels them otherwise): no data is a
// failure, not a pass.
func TestCanaryNoDataFailsClosed(t *testing.T) {
	parallel(t)
	e := newCanaryEnv(t, unseen)
	startStoreWorker(t, e.queue, e.srv)
	_, decision, _, breach := e.runBreached(t)
	reason, _ := breach["reason"].(string)
	if decision != "rolled_back" || breach["step"] != 1.0 || !strings.Contains(reason, "no data for the canary") {
		t.Fatalf("decision %q, breach %v", decision, breach)
	}
	e.wantMoves(t, []string{"promote:->v1"}, nil, nil)
}

// TestCanaryApproveAndReject: a human's approval mid-bake promotes at
// once; a rejection rolls back at once; both are recorded with who and why.
func TestCanaryApproveAndReject(t *testing.T) {
	parallelFor(t, 15*time.Second)
	t.Run("approve", func(t *testing.T) {
		t.Parallel()
		e := newCanaryEnv(t, healthy)
		startStoreWorker(t, e.queue, e.srv)
		id := e.start(t, "10m")
		waitBaking(t, id, 1)
		// The CLI finds the run's one baking canary.
		said, err := retrainCLI(t, "approve", id, "--reason", "dashboards look fine", "--user", "alice")
		if err != nil {
			t.Fatal(err)
		}
		t.Log(said)
		start := time.Now()
		res := wait(t, id)
		wantStatus(t, res, runs.StatusSucceeded)
		decision, steps, out := canaryOutputs(t, res)
		// The worker has no approvers list: the name is recorded as claimed.
		if decision != "approved" || out["decided_by"] != "claimed by alice" || len(steps) != 1 || time.Since(start) > 30*time.Second {
			t.Fatalf("decision %q by %v after %d steps", decision, out["decided_by"], len(steps))
		}
		e.wantMoves(t, []string{"promote:->v1", "promote:v1->v2"}, nil, nil)
		h, _ := e.reg.History(t.Context(), "ctr", "production")
		if r := h[len(h)-1].Reason; !strings.Contains(r, "approved, claimed by alice: dashboards look fine") {
			t.Errorf("promotion's reason %q does not say who approved and why", r)
		}
	})
	t.Run("reject", func(t *testing.T) {
		t.Parallel()
		e := newCanaryEnv(t, healthy)
		startStoreWorker(t, e.queue, e.srv)
		id := e.start(t, "10m")
		waitBaking(t, id, 1)
		said, err := retrainCLI(t, "reject", id, "--node", "canary", "--reason", "support tickets up", "--user", "bob")
		if err != nil {
			t.Fatal(err)
		}
		t.Log(said)
		res := wait(t, id)
		wantStatus(t, res, runs.StatusFailed)
		decision, _, out := canaryOutputs(t, res)
		if decision != "rejected" || out["decided_by"] != "claimed by bob" || !strings.Contains(node(t, res, "canary").Error, "support tickets up") {
			t.Fatalf("decision %q by %v: %s", decision, out["decided_by"], node(t, res, "canary").Error)
		}
		e.wantMoves(t, []string{"promote:->v1"}, []string{"promote:->v2", "rollback:v2->v1"}, nil)
	})
}

// TestCanaryRefusedWhenProductionMoved: a deploy moves production to v3
// while the canary bakes; the promotion's compare-and-swap refuses, the
// node says so, and the canary goes back to production as it now is.
func TestCanaryRefusedWhenProductionMoved(t *testing.T) {
	parallel(t)
	e := newCanaryEnv(t, healthy)
	startStoreWorker(t, e.queue, e.srv)
	id := e.start(t, "6s")
	waitBaking(t, id, 1)
	if _, err := e.reg.Promote(t.Context(), "ctr", "production", "v3", tester, "hotfix deploy"); err != nil {
		t.Fatal(err)
	}
	res := wait(t, id)
	wantStatus(t, res, runs.StatusFailed)
	decision, _, _ := canaryOutputs(t, res)
	n := node(t, res, "canary")
	t.Logf("node error: %s", n.Error)
	if decision != "refused" || !strings.Contains(n.Error, "production moved") || !strings.Contains(n.Error, "ConcurrentMove") {
		t.Fatalf("decision %q: %s", decision, n.Error)
	}
	e.wantMoves(t, []string{"promote:->v1", "promote:v1->v3"}, []string{"promote:->v2", "rollback:v2->v3"}, nil)
}
