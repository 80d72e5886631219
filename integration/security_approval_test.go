package integration

// Who approved: a client that may signal and update workflows sends a
// canary's approval in another person's name. With an approvers list on
// the worker, only a decision signed with a listed approver's key counts;
// without one, the approval is taken and recorded as claimed, never as
// "approved by" the name it carries.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	canarynode "github.com/retrain-ml/retrain/activities/canary"
	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/internal/approval"
	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/internal/storage"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/worker"
)

// forgedApproval is what the attacker sends: a raw canary-approve signal
// in someone else's name.
var forgedApproval = canarynode.Approval{By: "alice (head of ML platform)", Reason: "ship it"}

// TestSecurityCanaryApprovalListed: with an approvers list naming alice,
// a forged raw signal, an unsigned approval and one signed with the wrong
// key are refused (the canary keeps baking and its state and outputs say
// why); alice's signed approval promotes, recorded as hers.
func TestSecurityCanaryApprovalListed(t *testing.T) {
	parallel(t)
	e := newCanaryEnv(t, healthy)
	secrets := t.TempDir()
	key := randomValue(t, "alice-key-")
	writeFile(t, filepath.Join(secrets, "API_TOKEN"), "not an approver's key")
	if err := os.Mkdir(filepath.Join(secrets, approval.Dir), 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(secrets, approval.Dir, "alice"), key+"\n")
	keyFile, wrongKey := filepath.Join(t.TempDir(), "alice.key"), filepath.Join(t.TempDir(), "guess.key")
	writeFile(t, keyFile, key+"\n")
	writeFile(t, wrongKey, randomValue(t, "guess-")+"\n")
	startWorkerWith(t, worker.Config{TaskQueue: e.queue, Store: storage.Config{S3: e.srv.Config("")}, Env: progenv.Policy{SecretsDir: secrets}})
	id := e.start(t, "10m")
	waitBaking(t, id, 1)

	if err := tclient.SignalWorkflow(t.Context(), id+"/canary", "", canarynode.ApproveName, forgedApproval); err != nil {
		t.Fatal(err)
	}
	var st canarynode.State
	waitFor(t, 30*time.Second, func() bool {
		st, _ = canaryState(t.Context(), id)
		return len(st.Refused) == 1
	})
	t.Logf("forged signal: %s", st.Refused[0])
	if !strings.Contains(st.Refused[0], "not an approver this worker knows") || st.Phase != "baking" {
		t.Fatalf("state after a forged signal: %+v", st)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--user", "alice"}, "is not signed"},
		{[]string{"--user", "alice", "--key-file", wrongKey}, "signature is not alice's"},
		{[]string{"--user", "alice (head of ML platform)", "--key-file", keyFile}, "not an approver this worker knows"},
	} {
		_, err := retrainCLI(t, append([]string{"approve", id, "--reason", "ship it"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("approve %v: %v, want refused saying %q", tc.args, err, tc.want)
		}
		t.Logf("approve %v: refused: %v", tc.args, firstLine(err.Error()))
	}
	// What `retrain status --follow` shows of the baking canary.
	st, _ = canaryState(t.Context(), id)
	if line := cli.CanaryText(st, time.Now()); !strings.Contains(line, "refused") || len(st.Refused) != 4 {
		t.Errorf("retrain status --follow shows %q (%d refusals)", line, len(st.Refused))
	} else {
		t.Logf("retrain status --follow: %s", line)
	}
	said, err := retrainCLI(t, "approve", id, "--reason", "dashboards look fine", "--user", "alice", "--key-file", keyFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(strings.TrimSpace(said))
	res := wait(t, id)
	wantStatus(t, res, runs.StatusSucceeded)
	decision, _, out := canaryOutputs(t, res)
	refused, _ := out["refused_approvals"].([]any)
	if decision != "approved" || out["decided_by"] != "alice" || len(refused) != 4 {
		t.Fatalf("decision %q by %v, refused %v", decision, out["decided_by"], refused)
	}
	h, _ := e.reg.History(t.Context(), "ctr", "production")
	if r := h[len(h)-1].Reason; !strings.Contains(r, "approved by alice: dashboards look fine") {
		t.Errorf("promotion's reason %q", r)
	}
}

// TestSecurityCanaryApprovalClaimed: without an approvers list, the
// forged signal promotes (the worker cannot tell who sent it), and every
// record says the name was claimed: the outputs, the alias history, the
// report.
func TestSecurityCanaryApprovalClaimed(t *testing.T) {
	parallel(t)
	e := newCanaryEnv(t, healthy)
	startStoreWorker(t, e.queue, e.srv)
	id := e.start(t, "10m")
	waitBaking(t, id, 1)
	if err := tclient.SignalWorkflow(t.Context(), id+"/canary", "", canarynode.ApproveName, forgedApproval); err != nil {
		t.Fatal(err)
	}
	res := wait(t, id)
	wantStatus(t, res, runs.StatusSucceeded)
	decision, _, out := canaryOutputs(t, res)
	if decision != "approved" || out["decided_by"] != "claimed by alice (head of ML platform)" {
		t.Fatalf("decision %q by %v", decision, out["decided_by"])
	}
	h, _ := e.reg.History(t.Context(), "ctr", "production")
	r := h[len(h)-1].Reason
	t.Logf("alias history: %s", r)
	if !strings.Contains(r, "approved, claimed by alice (head of ML platform): ship it") || strings.Contains(r, "approved by alice") {
		t.Errorf("promotion's reason %q", r)
	}
	report := filepath.Join(t.TempDir(), "report.html")
	if err := cli.WriteRunReport(t.Context(), tclient, nil, res, report, cli.ReportLinks{}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(report)
	if !strings.Contains(string(b), "approved, claimed by alice (head of ML platform)") || strings.Contains(string(b), "approved by alice") {
		t.Errorf("the report does not say the name was claimed")
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
