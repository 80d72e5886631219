package gate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/nodetype"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	approvalnode "github.com/retrain-ml/retrain/activities/approval"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/approval"
)

// aliceKey is alice's key in the approvers list of approversList.
const aliceKey = "alice-key-0123456789abcdef0123456789"

// approversList returns a secrets folder whose approvers list names alice.
func approversList(t *testing.T) approval.Approvers {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, approval.Dir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, approval.Dir, "alice"), []byte(aliceKey), 0o600); err != nil {
		t.Fatal(err)
	}
	return approval.Approvers{SecretsDir: dir}
}

// signed is a gate approval by alice signed with her key, for the test
// environment's workflow execution.
func signed(env *testsuite.TestWorkflowEnvironment, key string) Approval {
	r := approval.Stamp([]byte(key), approval.Request{Workflow: "default-test-workflow-id", Execution: "default-test-run-id",
		Decision: ApproveUpdate, By: "alice", Reason: "known label delay"}, env.Now())
	return Approval{By: r.By, Reason: r.Reason, At: r.At, Signature: r.Signature}
}

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
		// listed: the worker has an approvers list naming alice.
		listed  bool
		refused string // a refusal the outputs or the error must say
	}{
		{name: "passes", with: passGate(0.8, nil), passed: true},
		{name: "rejected, deploy skipped", with: passGate(0.6, nil), passed: false, wantReason: "auc"},
		{name: "rejected, run fails", with: passGate(0.6, map[string]any{"on_reject": "fail"}), errType: errtype.GateRejected},
		{name: "approved by update while waiting", with: passGate(0.6, map[string]any{"wait_for_approval": "30m", "on_reject": "fail"}),
			approve: func(env *testsuite.TestWorkflowEnvironment, u *updateCallbacks) {
				env.UpdateWorkflow(ApproveUpdate, "1", u, Approval{By: "alice", Reason: "known label delay; AUC is fine on the full day"})
			}, passed: true, forcedBy: "claimed by alice", waited: true},
		{name: "approved by signal while waiting", with: passGate(0.6, map[string]any{"wait_for_approval": "30m"}),
			approve: func(env *testsuite.TestWorkflowEnvironment, _ *updateCallbacks) {
				env.SignalWorkflow(ApproveSignal, Approval{By: "bob", Reason: "hotfix"})
			}, passed: true, forcedBy: "claimed by bob", waited: true},
		{name: "signed approval with an approvers list", listed: true, with: passGate(0.6, map[string]any{"wait_for_approval": "30m", "on_reject": "fail"}),
			approve: func(env *testsuite.TestWorkflowEnvironment, u *updateCallbacks) {
				env.UpdateWorkflow(ApproveUpdate, "1", u, signed(env, aliceKey))
			}, passed: true, forcedBy: "alice", waited: true},
		{name: "unsigned approval with an approvers list is refused", listed: true, with: passGate(0.6, map[string]any{"wait_for_approval": "5m"}),
			approve: func(env *testsuite.TestWorkflowEnvironment, u *updateCallbacks) {
				env.UpdateWorkflow(ApproveUpdate, "1", u, Approval{By: "alice", Reason: "trust me"})
			}, passed: false, waited: true, updateErr: "not signed", refused: "not signed"},
		{name: "forged signal with an approvers list is refused", listed: true, with: passGate(0.6, map[string]any{"wait_for_approval": "5m"}),
			approve: func(env *testsuite.TestWorkflowEnvironment, _ *updateCallbacks) {
				env.SignalWorkflow(ApproveSignal, signed(env, "mallory's guess at alice's key!!"))
			}, passed: false, waited: true, refused: "signature is not alice's"},
		{name: "unknown approver with an approvers list is refused", listed: true, with: passGate(0.6, map[string]any{"wait_for_approval": "5m"}),
			approve: func(env *testsuite.TestWorkflowEnvironment, _ *updateCallbacks) {
				env.SignalWorkflow(ApproveSignal, Approval{By: "alice (head of ML platform)", Reason: "ship it"})
			}, passed: false, waited: true, refused: "not an approver"},
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
			var list approval.Approvers
			if tt.listed {
				list = approversList(t)
			}
			verify := &approvalnode.Activities{Approvers: list, Now: env.Now}
			env.RegisterActivityWithOptions(verify.Verify, activity.RegisterOptions{Name: VerifyActivity})
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
			if tt.refused != "" {
				refused, _ := out["refused_approvals"].([]any)
				if len(refused) != 1 || !strings.Contains(refused[0].(string), tt.refused) {
					t.Errorf("refused_approvals %v, want one saying %q", out["refused_approvals"], tt.refused)
				}
			}
			if tt.updateErr == "" && tt.approve != nil && u.err != nil {
				t.Errorf("update rejected: %v", u.err)
			}
		})
	}
}
