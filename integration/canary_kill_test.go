package integration

import (
	"testing"
	"time"

	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	canarynode "github.com/retrain-ml/retrain/activities/canary"
	"github.com/retrain-ml/retrain/runs"
)

// TestCanaryWorkerKilledMidBake SIGKILLs the only worker 2 s into step
// 1's bake of 10 s and starts another 2 s later: the bake is a timer on
// the server, so the step ends when planned (within the heartbeat), the
// canary goes on to step 2 and is promoted, and every move and webhook
// happens once.
func TestCanaryWorkerKilledMidBake(t *testing.T) {
	const bake, heartbeat = 10 * time.Second, 2 * time.Second
	e := newCanaryEnv(t, healthy)
	env := childStoreEnv(e.srv)
	w := startChildWorker(t, e.queue, env...)
	// A heartbeat of 2 s (the other canary tests use 10 s, as they share
	// the machine): the new worker takes over within it.
	id := e.startSpec(t, specEdit(canarySpec, "heartbeat: 10s", "heartbeat: "+heartbeat.String()), e.params(bake.String()))
	waitBaking(t, id, 1)
	killed := time.Now()
	if err := w.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = w.Wait()
	time.Sleep(2 * time.Second)
	restarted := time.Now()
	startChildWorker(t, e.queue, env...)
	res := wait(t, id)
	wantStatus(t, res, runs.StatusSucceeded)
	decision, steps, _ := canaryOutputs(t, res)
	logSteps(t, steps)
	if decision != "promoted" || len(steps) != 3 {
		t.Fatalf("decision %q after %d steps", decision, len(steps))
	}
	step1 := steps[0].(map[string]any)
	started, _ := time.Parse(time.RFC3339Nano, step1["started"].(string))
	ended, _ := time.Parse(time.RFC3339Nano, step1["ended"].(string))
	planned := started.Add(bake)
	n := node(t, res, "canary")
	t.Logf("timeline: step 1 started %s; worker SIGKILLed %s (+%.1fs); new worker %s (+%.1fs); step 1 planned end %s, ended %s (%+.2fs); decision (node ended) %s",
		started.Format(time.TimeOnly+".000"), killed.Format(time.TimeOnly+".000"), killed.Sub(started).Seconds(),
		restarted.Format(time.TimeOnly+".000"), restarted.Sub(started).Seconds(),
		planned.Format(time.TimeOnly+".000"), ended.Format(time.TimeOnly+".000"), ended.Sub(planned).Seconds(),
		n.EndedAt.Format(time.TimeOnly+".000"))
	step2 := steps[1].(map[string]any)
	started2, _ := time.Parse(time.RFC3339Nano, step2["started"].(string))
	planned2 := started2.Add(bake)
	t.Logf("timeline: step 2 started %s, planned end %s; decision (node ended) %s (%+.2fs after the planned end)",
		started2.Format(time.TimeOnly+".000"), planned2.Format(time.TimeOnly+".000"), n.EndedAt.Format(time.TimeOnly+".000"), n.EndedAt.Sub(planned2).Seconds())
	if d := n.EndedAt.Sub(planned2); d < 0 || d > heartbeat {
		t.Errorf("decided %v after step 2's planned end, want within the heartbeat (%v)", d, heartbeat)
	}
	if d := ended.Sub(planned); d < 0 || d > heartbeat {
		t.Errorf("step 1 ended %v after its planned end, want within the heartbeat (%v)", d, heartbeat)
	}
	e.wantMoves(t, []string{"promote:->v1", "promote:v1->v2"}, []string{"promote:->v2"}, []string{"v1/v2@10", "v1/v2@50", "v2/v2@100"})
	// The canary's history, a worker lost mid-bake and all, replays
	// against this code: the workflow is deterministic.
	replayer := sdkworker.NewWorkflowReplayer()
	replayer.RegisterWorkflowWithOptions(canarynode.Canary, workflow.RegisterOptions{Name: canarynode.Workflow})
	if err := replayer.ReplayWorkflowHistory(nil, history(t, tclient, id+"/canary")); err != nil {
		t.Errorf("replay of the canary whose worker was killed: %v", err)
	}
}
