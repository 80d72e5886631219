package gate

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/activities/approval"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/gate"
	"github.com/retrain-ml/retrain/nodetype"
)

// Names a human's approval of a failed gate goes by. The update answers
// the approver (accepted, or why not); the signal is for tools that can
// only signal (the Web UI). Both carry an Approval.
const (
	ApproveUpdate = "approve"
	ApproveSignal = "approve"
	GateQuery     = "gate" // query: the GateState
)

// Approval is a human's override of a failed gate: who and why (tfx#4390).
type Approval struct {
	By     string `json:"by"`
	Reason string `json:"reason"`
	// At and Signature sign the decision with the approver's key (see
	// internal/approval); a worker with an approvers list takes only
	// signed decisions.
	At        string `json:"at,omitempty"`
	Signature string `json:"signature,omitempty"`
}

// GateState is what the gate query returns.
type GateState struct {
	Result  gate.Result `json:"result"`
	Waiting bool        `json:"waiting"` // waiting for an approval now
	// Refused says the latest approvals the worker refused (unsigned,
	// badly signed, an unknown name), newest last.
	Refused []string `json:"refused,omitempty"`
}

// Gate runs a gate node: it evaluates the thresholds (a pure function,
// recorded once in history as a side effect, so that replays never depend
// on a later version of the gate package), and when the candidate failed
// and wait_for_approval is set, waits that long for an approval. Then it
// outputs the verdict, or fails the node when the candidate was rejected
// and on_reject is fail.
func Gate(ctx workflow.Context, in nodetype.Input) (nodetype.Result, error) {
	started := workflow.Now(ctx)
	with, registry, err := resolveRegistryBaseline(ctx, in)
	if err != nil {
		return nodetype.Result{}, err
	}
	var d GateDecision
	if err := workflow.SideEffect(ctx, func(workflow.Context) any {
		return DecideGate(with)
	}).Get(&d); err != nil {
		return nodetype.Result{}, err
	}
	if d.Error != "" {
		return nodetype.Result{}, temporal.NewNonRetryableApplicationError(d.Error, errtype.BadInput, nil)
	}
	source := baselineSource(with, registry, &d)
	state := GateState{Result: d.Result}
	if err := workflow.SetQueryHandler(ctx, GateQuery, func() (GateState, error) { return state, nil }); err != nil {
		return nodetype.Result{}, err
	}

	waited := false
	if !state.Result.Passed && d.Wait > 0 {
		waited = true
		approved, who, err := awaitApproval(ctx, &state, d)
		if err != nil {
			return nodetype.Result{}, err
		}
		if approved != nil {
			forced, err := gate.Force(state.Result, who, approved.Reason)
			if err != nil { // the validators make this unreachable
				return nodetype.Result{}, temporal.NewNonRetryableApplicationError(err.Error(), errtype.BadInput, nil)
			}
			state.Result = forced
			workflow.GetLogger(ctx).Info("gate forced", "by", who, "reason", approved.Reason)
		}
	}

	out := GateOutputs(state.Result, waited)
	out.BaselineSource, out.BaselineLogicalDate = source, d.BaselineLogicalDate
	if state.Refused != nil {
		out.RefusedApprovals = state.Refused
	}
	outputs, err := nodetype.Outputs(out)
	if err != nil {
		return nodetype.Result{}, err
	}
	if !state.Result.Passed && d.OnReject == RejectFail {
		return nodetype.Result{}, temporal.NewNonRetryableApplicationError(
			RejectionMessage(state.Result), errtype.GateRejected, nil, outputs)
	}
	return nodetype.Result{
		Outputs:   outputs,
		Attempt:   workflow.GetInfo(ctx).Attempt,
		StartedAt: started,
		EndedAt:   workflow.Now(ctx),
	}, nil
}

// awaitApproval waits up to d.Wait for an approval by update or signal and
// returns it with how its maker is recorded, or nil when the time ran out.
// The worker verifies who sent it (activities/approval): a refused
// approval changes nothing, and the gate keeps waiting.
func awaitApproval(ctx workflow.Context, state *GateState, d GateDecision) (*Approval, string, error) {
	keeper := approval.NewKeeper(ctx, VerifyActivity)
	var approved *Approval
	var who string
	valid := func(a Approval) error {
		switch {
		case !state.Waiting || approved != nil:
			return errors.New("the gate is not waiting for an approval")
		case strings.TrimSpace(a.By) == "":
			return errors.New("an approval must say who approves")
		case strings.TrimSpace(a.Reason) == "":
			return errors.New("an approval must give a reason")
		}
		return nil
	}
	until := workflow.Now(ctx).Add(d.Wait)
	// take verifies a and, when the worker takes it and the gate still
	// waits, makes it the approval.
	take := func(ctx workflow.Context, a Approval) (string, error) {
		by, refusal := keeper.Check(ctx, ApproveUpdate, approval.Decision{By: a.By, Reason: a.Reason, At: a.At, Signature: a.Signature})
		if refusal != "" {
			state.Refused = keeper.Refused
			workflow.SetCurrentDetails(ctx, waitingDetails(state.Result, until, runOf(ctx), state.Refused))
			return "", errors.New(refusal)
		}
		if err := valid(a); err != nil {
			return "", err
		}
		approved, who = &a, by
		return by, nil
	}
	err := workflow.SetUpdateHandlerWithOptions(ctx, ApproveUpdate,
		func(ctx workflow.Context, a Approval) (string, error) {
			if err := valid(a); err != nil {
				return "", err
			}
			by, err := take(ctx, a)
			if err != nil {
				return "", err
			}
			return "gate " + workflow.GetInfo(ctx).WorkflowExecution.ID + " " + approval.Phrase("forced to pass", by), nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, a Approval) error { return valid(a) }},
	)
	if err != nil {
		return nil, "", err
	}
	signals := workflow.GetSignalChannel(ctx, ApproveSignal)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var a Approval
			if !signals.Receive(ctx, &a) {
				return
			}
			if err := valid(a); err != nil {
				workflow.GetLogger(ctx).Warn("approval signal ignored", "error", err, "by", a.By)
				continue
			}
			if _, err := take(ctx, a); err != nil {
				workflow.GetLogger(ctx).Warn("approval signal ignored", "error", err)
			}
		}
	})

	state.Waiting = true
	workflow.GetLogger(ctx).Info("gate failed; waiting for an approval", "wait", d.Wait, "reason", state.Result.Reason)
	// What the Web UI shows on this child's page while it waits (memory
	// only: nothing is recorded, so replay is unaffected).
	workflow.SetCurrentDetails(ctx, waitingDetails(state.Result, until, runOf(ctx), nil))
	if _, err := workflow.AwaitWithTimeout(ctx, d.Wait, func() bool { return approved != nil }); err != nil {
		return nil, "", err
	}
	state.Waiting = false
	if approved != nil {
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("**Gate %s**: %s", approval.Phrase("approved", who), approved.Reason))
	} else {
		workflow.SetCurrentDetails(ctx, "**Gate rejected**: no approval came before the wait ended.")
	}
	return approved, who, nil
}

// runOf is the id of the Pipeline run this gate belongs to: its parent's.
func runOf(ctx workflow.Context) string {
	if p := workflow.GetInfo(ctx).ParentWorkflowExecution; p != nil {
		return p.ID
	}
	return workflow.GetInfo(ctx).WorkflowExecution.ID
}

// waitingDetails says what a gate waits for: the failed checks, until when,
// and the command that approves the candidate.
func waitingDetails(r gate.Result, until time.Time, run string, refused []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "**Waiting for an approval** until %s UTC: the gate rejected candidate %s", until.UTC().Format(time.DateTime), r.CandidateID)
	if r.HasBaseline {
		fmt.Fprintf(&b, " against %s", r.BaselineVersion)
	}
	b.WriteString(".\n\n")
	for _, c := range r.Failed() {
		fmt.Fprintf(&b, "- %s %s: %s\n", c.Metric, c.Check, c.Reason)
	}
	fmt.Fprintf(&b, "\nTo deploy it anyway: `retrain approve %s --force --reason \"...\"`; without an approval the gate rejects it when the wait ends.\n", run)
	if len(refused) > 0 {
		b.WriteString("\nRefused approvals (the gate keeps waiting):\n")
		for _, s := range refused {
			fmt.Fprintf(&b, "- %s\n", s)
		}
	}
	return b.String()
}

// baselineSource names where the baseline's figures came from, and for a
// registry baseline says so in the verdict's reason too: its figures are
// the version's own evaluation, not a scoring on this run's rows.
func baselineSource(with map[string]any, registry *RegistryBaseline, d *GateDecision) string {
	switch {
	case !d.Result.HasBaseline:
		return ""
	case registry != nil:
		d.BaselineLogicalDate = registry.LogicalDate
		ref := registry.Model + "@" + registry.Version
		trained := ""
		if registry.LogicalDate != "" {
			trained = ", trained for " + registry.LogicalDate
		}
		d.Result.Reason += fmt.Sprintf("; the baseline's figures are those recorded with %s (%s%s), from its own evaluation, not scored on this run's rows",
			ref, registry.Alias, trained)
		return "registry " + ref
	}
	if _, ok := with["evaluation"]; ok {
		return "evaluation"
	}
	return "given"
}
