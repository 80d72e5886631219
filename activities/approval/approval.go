// Package approval verifies a human's decision on a gate or a canary on
// the worker (the workflow cannot read the approvers list: it is a file,
// and the result must be recorded for replays) and keeps, in the
// workflow, what was refused. See internal/approval for the rules.
package approval

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/internal/approval"
)

// Activities verify decisions against the worker's approvers list.
type Activities struct {
	Approvers approval.Approvers
	Now       func() time.Time // nil: time.Now
}

// Verify is the activity: the verdict on one decision. The keys never
// leave it.
func (a *Activities) Verify(ctx context.Context, r approval.Request) (approval.Verdict, error) {
	now := time.Now
	if a != nil && a.Now != nil {
		now = a.Now
	}
	var list approval.Approvers
	if a != nil {
		list = a.Approvers
	}
	return list.Verify(r, now())
}

// Decision is what a sender sent: who, why, and the signature's fields.
type Decision struct {
	By, Reason, At, Signature string
}

// change marks workflows that verify decisions; in histories recorded
// before it, the name a decision carried was taken as sent.
const change = "approval-verified"

// maxRefused bounds the refusals a workflow keeps and shows, and
// maxChecks the decisions it verifies: past them a flood of forged
// decisions is refused unread, and costs the history nothing more.
const (
	maxRefused = 5
	maxChecks  = 20
)

// Keeper is a workflow's checker of decisions.
type Keeper struct {
	activity string
	verified bool // false in histories recorded before verification
	listed   bool // a verdict showed the worker has an approvers list
	checks   int
	// Refused says, newest last, the latest decisions refused and why.
	Refused []string
}

// NewKeeper returns the checker of a workflow whose verification activity
// is registered as activity. Call it once, at the same point of the
// workflow every time: it records the change marker.
func NewKeeper(ctx workflow.Context, activity string) *Keeper {
	v := workflow.GetVersion(ctx, change, workflow.DefaultVersion, 1)
	return &Keeper{activity: activity, verified: v >= 1}
}

// Check verifies decision d, sent by update or signal name to this
// workflow. It returns how its maker is recorded (approval.Who), or a
// refusal, a sentence, when the worker does not take it; the refusal is
// also kept in Refused and logged.
func (k *Keeper) Check(ctx workflow.Context, name string, d Decision) (who, refusal string) {
	if !k.verified {
		return d.By, ""
	}
	refuse := func(why string) (string, string) {
		s := fmt.Sprintf("%s by %q refused at %s UTC: %s", name, clip(d.By), workflow.Now(ctx).UTC().Format(time.DateTime), why)
		k.Refused = append(k.Refused, s)
		if len(k.Refused) > maxRefused {
			k.Refused = k.Refused[len(k.Refused)-maxRefused:]
		}
		workflow.GetLogger(ctx).Warn("decision refused: the run keeps waiting", "decision", name, "by", clip(d.By), "why", why)
		return "", s
	}
	switch {
	case k.checks >= maxChecks:
		return refuse(fmt.Sprintf("%d decisions were checked already; no more are", maxChecks))
	case k.listed && d.Signature == "":
		return refuse("it is not signed, and this worker takes only signed decisions (retrain approve signs with --key-file)")
	}
	k.checks++
	info := workflow.GetInfo(ctx)
	req := approval.Request{Workflow: info.WorkflowExecution.ID, Execution: info.WorkflowExecution.RunID, Decision: name,
		By: d.By, Reason: d.Reason, At: d.At, Signature: d.Signature}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3, InitialInterval: time.Second},
	})
	var v approval.Verdict
	if err := workflow.ExecuteActivity(actx, k.activity, req).Get(actx, &v); err != nil {
		return refuse("the worker could not verify it: " + err.Error())
	}
	switch v.Mode {
	case approval.Signed:
		k.listed = true
		return d.By, ""
	case approval.Claimed:
		return approval.Who(d.By, approval.Claimed), ""
	}
	k.listed = true
	return refuse(v.Refusal)
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

// Phrase says who decided after verb (internal/approval.Phrase):
// "approved by alice", or "approved, claimed by alice".
func Phrase(verb, who string) string { return approval.Phrase(verb, who) }
