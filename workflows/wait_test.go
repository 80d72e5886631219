package workflows

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	ready "github.com/retrain-ml/retrain/internal/readiness"
	"github.com/retrain-ml/retrain/runs"
)

const waitSpec = `name: waits
params:
  ns: {default: features}
wait_for:
  - table: ${params.ns}.user_daily
    deadline: %DEADLINE%
    poll: 10m
    on_deadline: %ON%
nodes:
  - {id: train, type: step, with: {v: 1}}
  - {id: deploy, type: step, needs: [train]}
`

func waitSpecWith(deadline, on string) string {
	return strings.NewReplacer("%DEADLINE%", deadline, "%ON%", on).Replace(waitSpec)
}

// dataAfter answers the table check "not yet" until n checks were made,
// recording what each check was asked.
type dataAfter struct {
	mu    sync.Mutex
	n     int
	asked []runs.ReadinessCheck
}

func (d *dataAfter) check(in runs.ReadinessCheck) (ready.Observation, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asked = append(d.asked, in)
	if len(d.asked) <= d.n {
		return ready.Observation{Saw: "features.user_daily has no rows for " + in.LogicalDate}, nil
	}
	return ready.Observation{Ready: true, Saw: "1,000 rows", SnapshotID: 77, Rows: 1000}, nil
}

func TestRunWaitsForItsData(t *testing.T) {
	h := newHarness(t)
	data := &dataAfter{n: 3}
	h.check, h.logicalDate = data.check, "2026-11-27"
	var states []runs.Result
	h.onEnv = func(env *testsuite.TestWorkflowEnvironment) {
		// Query the run while it waits: after the first two timers.
		for _, at := range []time.Duration{5 * time.Minute, 20 * time.Minute} {
			env.RegisterDelayedCallback(func() {
				v, err := env.QueryWorkflow(runs.StateQuery)
				if err != nil {
					t.Errorf("query: %v", err)
					return
				}
				var st runs.Result
				if err := v.Get(&st); err != nil {
					t.Error(err)
				}
				states = append(states, st)
			}, at)
		}
	}
	res := h.succeed(waitSpecWith("6h", "fail"), nil, nil)
	if len(data.asked) != 4 {
		t.Fatalf("checks = %d, want 4 (3 not ready, then ready)", len(data.asked))
	}
	if c := data.asked[0]; c.Condition.Table != "features.user_daily" || c.LogicalDate != "2026-11-27" || c.Pipeline != "waits" {
		t.Errorf("check asked %+v: the table resolved from its param, for the run's date", c)
	}
	if len(states) != 2 {
		t.Fatalf("queried %d states", len(states))
	}
	for _, st := range states {
		if st.Status != runs.StatusWaiting || len(st.Waiting) != 1 ||
			st.Waiting[0].Saw != "features.user_daily has no rows for 2026-11-27" || st.Waiting[0].Condition != "table features.user_daily" {
			t.Errorf("state while waiting: %s %+v", st.Status, st.Waiting)
		}
		if n := st.Node("train"); n.Status != runs.NodePending {
			t.Errorf("train %s while the run waits", n.Status)
		}
	}
	if len(res.Waiting) != 0 || len(res.Ready) != 1 || res.Ready[0].SnapshotID != "77" || res.Ready[0].Rows != 1000 || res.Ready[0].Table != "features.user_daily" {
		t.Errorf("result: waiting %+v, ready %+v", res.Waiting, res.Ready)
	}
	// The backoff: 10m, 15m, 22m30s between the four checks.
	if got := res.Ready[0].At.Sub(res.StartedAt); got != 10*time.Minute+15*time.Minute+22*time.Minute+30*time.Second {
		t.Errorf("data seen ready %s after the start", got)
	}
}

func TestRunDataNotReadyFails(t *testing.T) {
	h := newHarness(t)
	data := &dataAfter{n: 1000}
	h.check, h.logicalDate = data.check, "2026-11-27"
	_, err := h.run(waitSpecWith("1h", "fail"), nil, nil)
	res := mustFail(t, err)
	if !strings.Contains(res.Error, "wait_for table features.user_daily did not hold within its deadline 1h0m0s") ||
		!strings.Contains(res.Error, "last check: features.user_daily has no rows for 2026-11-27") {
		t.Errorf("error %q", res.Error)
	}
	var appErr *temporal.ApplicationError
	found := false
	for e := error(err); e != nil; e = errors.Unwrap(e) {
		if errors.As(e, &appErr) && appErr.Type() == errtype.DataNotReady {
			found = true
			break
		}
	}
	if !found {
		t.Errorf("no DataNotReady in %v", err)
	}
	if n := res.Node("train"); n.Status != runs.NodeCancelled {
		t.Errorf("train %s", n.Status)
	}
	// 10m + 15m + 22m30s, then the 12m30s left: 5 checks.
	if len(data.asked) != 5 {
		t.Errorf("checks = %d", len(data.asked))
	}
}

func TestRunDataNotReadySkips(t *testing.T) {
	h := newHarness(t)
	h.check, h.logicalDate = (&dataAfter{n: 1000}).check, "2026-11-27"
	res, err := h.run(waitSpecWith("30m", "skip"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != runs.StatusSkipped || !strings.Contains(res.Error, "did not hold within its deadline 30m0s") {
		t.Errorf("status %s, error %q", res.Status, res.Error)
	}
	for _, n := range res.Nodes {
		if n.Status != runs.NodeSkipped || !strings.Contains(n.Reason, "data not ready") {
			t.Errorf("node %s: %s %q", n.ID, n.Status, n.Reason)
		}
	}
}

func TestRunBadConditionFailsAtOnce(t *testing.T) {
	h := newHarness(t)
	checks := 0
	h.check, h.logicalDate = func(in runs.ReadinessCheck) (ready.Observation, error) {
		checks++
		return ready.Observation{}, temporal.NewNonRetryableApplicationError("wait_for table features.user_daily: the lake has no such table", errtype.BadInput, nil)
	}, "2026-11-27"
	_, err := h.run(waitSpecWith("6h", "fail"), nil, nil)
	res := mustFail(t, err)
	if checks != 1 || !strings.Contains(res.Error, "the lake has no such table") || res.EndedAt.Sub(res.StartedAt) > time.Minute {
		t.Errorf("checks %d, error %q, after %s", checks, res.Error, res.EndedAt.Sub(res.StartedAt))
	}
}

func TestNodeWaitsForItsData(t *testing.T) {
	const spec = `name: nodewait
nodes:
  - {id: a, type: step}
  - id: b
    type: step
    needs: [a]
    wait_for: [{files: "/data/${run.logical_date}/*.csv", deadline: 1h, poll: 10m, on_deadline: %ON%}]
  - {id: c, type: step, needs: [b]}
  - {id: d, type: step, needs: [a]}
`
	h := newHarness(t)
	data := &dataAfter{n: 2}
	h.check, h.logicalDate = data.check, "2026-11-27"
	res := h.succeed(strings.ReplaceAll(spec, "%ON%", "fail"), nil, nil)
	if data.asked[0].Condition.Files != "/data/2026-11-27/*.csv" {
		t.Errorf("asked %+v", data.asked[0])
	}
	if strings.Join(h.order, ",") != "a,d,b,c" {
		t.Errorf("order %v: d does not wait for b's data", h.order)
	}
	if len(res.Ready) != 1 || res.Ready[0].Node != "b" {
		t.Errorf("ready %+v", res.Ready)
	}

	h = newHarness(t)
	h.check, h.logicalDate = (&dataAfter{n: 1000}).check, "2026-11-27"
	res = h.succeed(strings.ReplaceAll(spec, "%ON%", "skip"), nil, nil)
	for id, want := range map[string]runs.NodeStatus{"a": runs.NodeSucceeded, "b": runs.NodeSkipped, "c": runs.NodeSkipped, "d": runs.NodeSucceeded} {
		if n := res.Node(id); n.Status != want {
			t.Errorf("node %s %s (%s), want %s", id, n.Status, n.Reason, want)
		}
	}
}

func TestReadyTablePinsSnapshot(t *testing.T) {
	const spec = `name: pins
wait_for:
  - {table: features.user_daily, deadline: 1h}
nodes:
  - {id: read, type: reader, with: {table: features.user_daily}}
  - {id: chosen, type: reader, with: {table: features.user_daily, snapshot_id: "5"}}
  - {id: other, type: reader, with: {table: features.ad_daily}}
  - id: late
    type: reader
    with: {table: features.ad_daily}
    wait_for: [{table: features.ad_daily, deadline: 1h}]
`
	h := newHarness(t)
	h.types = []dags.NodeType{{Name: "reader", Fields: []dags.Field{{Name: "table", Type: dags.FieldString}, {Name: "snapshot_id", Type: dags.FieldAny}}}}
	h.check, h.logicalDate = (&dataAfter{n: 0}).check, "2026-11-27"
	res := h.succeed(spec, nil, nil)
	for id, want := range map[string]any{"read": "77", "chosen": "5", "other": nil, "late": "77"} {
		if got := res.Node(id).Outputs["snapshot_id"]; got != want {
			t.Errorf("node %s read snapshot %v, want %v", id, got, want)
		}
	}
}
