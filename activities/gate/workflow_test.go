package gate

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/nodetype"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/errtype"
)

// passGate is a gate that a candidate with AUC auc passes when auc >= 0.7.
func passGate(auc float64, extra map[string]any) map[string]any {
	w := map[string]any{
		"metrics":      map[string]any{"auc": map[string]any{"min": 0.7}},
		"candidate":    map[string]any{"auc": auc},
		"candidate_id": "cand",
	}
	for k, v := range extra {
		w[k] = v
	}
	return w
}

// updateCallbacks records what became of an update.
type updateCallbacks struct {
	wantErr  string
	accepted bool
	result   any
	err      error
}

func (u *updateCallbacks) Accept()          { u.accepted = true }
func (u *updateCallbacks) Reject(err error) { u.err = err }
func (u *updateCallbacks) Complete(r any, err error) {
	u.result = r
	if err != nil {
		u.err = err
	}
}

func TestGateWorkflow(t *testing.T) {
	tests := []struct {
		name string
		with map[string]any
		// approve, when set, runs at 1 minute into the workflow.
		approve    func(env *testsuite.TestWorkflowEnvironment, u *updateCallbacks)
		passed     bool
		forcedBy   string
		waited     bool
		errType    string
		updateErr  string
		wantReason string
	}{
		{name: "passes", with: passGate(0.8, nil), passed: true},
		{name: "rejected, deploy skipped", with: passGate(0.6, nil), passed: false, wantReason: "auc"},
		{name: "rejected, run fails", with: passGate(0.6, map[string]any{"on_reject": "fail"}), errType: errtype.GateRejected},
		{name: "approved by update while waiting", with: passGate(0.6, map[string]any{"wait_for_approval": "30m", "on_reject": "fail"}),
			approve: func(env *testsuite.TestWorkflowEnvironment, u *updateCallbacks) {
				env.UpdateWorkflow(ApproveUpdate, "1", u, Approval{By: "alice", Reason: "known label delay; AUC is fine on the full day"})
			}, passed: true, forcedBy: "alice", waited: true},
		{name: "approved by signal while waiting", with: passGate(0.6, map[string]any{"wait_for_approval": "30m"}),
			approve: func(env *testsuite.TestWorkflowEnvironment, _ *updateCallbacks) {
				env.SignalWorkflow(ApproveSignal, Approval{By: "bob", Reason: "hotfix"})
			}, passed: true, forcedBy: "bob", waited: true},
		{name: "approval without a reason is refused", with: passGate(0.6, map[string]any{"wait_for_approval": "5m"}),
			approve: func(env *testsuite.TestWorkflowEnvironment, u *updateCallbacks) {
				env.UpdateWorkflow(ApproveUpdate, "1", u, Approval{By: "alice"})
			}, passed: false, waited: true, updateErr: "reason"},
		{name: "nobody approves in time", with: passGate(0.6, map[string]any{"wait_for_approval": "5m", "on_reject": "fail"}),
			errType: errtype.GateRejected},
		{name: "a passed gate is not waiting", with: passGate(0.8, map[string]any{"wait_for_approval": "5m"}),
			passed: true},
		{name: "bad input fails without retry", with: map[string]any{"metrics": map[string]any{}, "candidate": map[string]any{}},
			errType: errtype.BadInput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s testsuite.WorkflowTestSuite
			env := s.NewTestWorkflowEnvironment()
			env.RegisterWorkflowWithOptions(Gate, workflow.RegisterOptions{Name: GateWorkflow})
			u := &updateCallbacks{}
			if tt.approve != nil {
				env.RegisterDelayedCallback(func() { tt.approve(env, u) }, time.Minute)
			}
			env.ExecuteWorkflow(GateWorkflow, nodetype.Input{Pipeline: "p", RunID: "r", Node: "gate", Type: "gate", With: tt.with})
			if !env.IsWorkflowCompleted() {
				t.Fatal("gate did not complete")
			}
			err := env.GetWorkflowError()
			if tt.errType != "" {
				var appErr *temporal.ApplicationError
				if !errors.As(err, &appErr) || appErr.Type() != tt.errType || !appErr.NonRetryable() {
					t.Fatalf("error %v, want a non-retryable %s", err, tt.errType)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var res nodetype.Result
			if err := env.GetWorkflowResult(&res); err != nil {
				t.Fatal(err)
			}
			out := res.Outputs
			if out["passed"] != tt.passed || out["waited"] != tt.waited {
				t.Fatalf("outputs %v", out)
			}
			if tt.forcedBy != "" && (out["forced"] != true || out["forced_by"] != tt.forcedBy || out["force_reason"] == "") {
				t.Fatalf("not recorded as forced by %s: %v", tt.forcedBy, out)
			}
			if tt.wantReason != "" && !strings.Contains(out["reason"].(string), tt.wantReason) {
				t.Errorf("reason %q", out["reason"])
			}
			if tt.updateErr != "" && (u.err == nil || !strings.Contains(u.err.Error(), tt.updateErr)) {
				t.Errorf("update error %v, want one about %q", u.err, tt.updateErr)
			}
			if tt.updateErr == "" && tt.approve != nil && u.err != nil {
				t.Errorf("update rejected: %v", u.err)
			}
		})
	}
}
