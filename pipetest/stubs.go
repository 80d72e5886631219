package pipetest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	approvalnode "github.com/retrain-ml/retrain/activities/approval"
	canarynode "github.com/retrain-ml/retrain/activities/canary"
	gatenode "github.com/retrain-ml/retrain/activities/gate"
	"github.com/retrain-ml/retrain/internal/canary"
	"github.com/retrain-ml/retrain/nodetype"
)

// ErrNotStubbed is the error type of a node that a case gives no stub:
// the node fails, and so does the case, naming it.
const ErrNotStubbed = "NotStubbed"

// caseRun is one case's run: its stubs, and what the nodes did.
type caseRun struct {
	c     *Case
	stubs map[string]*Stub
	env   *testsuite.TestWorkflowEnvironment

	mu        sync.Mutex
	attempts  map[string]int            // node id -> attempts dispatched
	with      map[string]map[string]any // node id -> the last `with` it got
	errTypes  map[string]string         // node id -> its last error's type
	running   map[string]string         // node id -> "running" or "waiting to retry"
	traffic   map[string][]float64      // canary node id -> splits, in order
	steps     map[string]int            // canary node id -> step baking (1-based)
	problems  []string                  // what fails the case whatever it expects
	fired     map[*Decision]bool        // stubbed decisions due (their step came)
	delivered map[*Decision]bool        // and signalled to a running node
	cancels   []context.CancelFunc      // of the nodes that run for real
}

// stop cancels the nodes that run for real: the case is over.
func (h *caseRun) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.cancels {
		c()
	}
}

func newCaseRun(c *Case, env *testsuite.TestWorkflowEnvironment) *caseRun {
	h := &caseRun{c: c, env: env, stubs: map[string]*Stub{}, attempts: map[string]int{}, with: map[string]map[string]any{},
		errTypes: map[string]string{}, running: map[string]string{}, traffic: map[string][]float64{}, steps: map[string]int{}, fired: map[*Decision]bool{}, delivered: map[*Decision]bool{}}
	for _, s := range c.Stubs {
		h.stubs[s.Node] = s
	}
	return h
}

func (h *caseRun) problem(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	if !slices.Contains(h.problems, msg) {
		h.problems = append(h.problems, msg)
	}
}

// stub returns the stub of a node or instance: its own, else its foreach
// node's.
func (h *caseRun) stub(id string) *Stub {
	if s, ok := h.stubs[id]; ok {
		return s
	}
	if m := instanceRe.FindStringSubmatch(id); m != nil {
		return h.stubs[m[1]]
	}
	return nil
}

// begin records an attempt of a node and returns its stub and the
// attempt's number.
func (h *caseRun) begin(in nodetype.Input) (*Stub, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.attempts[in.Node]++
	h.with[in.Node] = in.With
	h.running[in.Node] = "running"
	return h.stub(in.Node), h.attempts[in.Node]
}

// end records how an attempt ended.
func (h *caseRun) end(node string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.running, node)
	if err == nil {
		delete(h.errTypes, node)
		return
	}
	h.errTypes[node] = errorType(err)
	if ae, ok := err.(*temporal.ApplicationError); ok && !ae.NonRetryable() {
		h.running[node] = "waiting to retry"
	}
}

func errorType(err error) string {
	var ae *temporal.ApplicationError
	if temporal.IsApplicationError(err) {
		for e := err; e != nil; {
			if a, ok := e.(*temporal.ApplicationError); ok {
				ae = a
				break
			}
			u, ok := e.(interface{ Unwrap() error })
			if !ok {
				break
			}
			e = u.Unwrap()
		}
	}
	if ae != nil {
		return ae.Type()
	}
	if temporal.IsTimeoutError(err) {
		return "Timeout"
	}
	return ""
}

// notStubbed fails a node that has no stub, and its case with it.
func (h *caseRun) notStubbed(in nodetype.Input, why string) error {
	h.problem("node %s (type %s) has no stub%s: a test never runs a node for real; give it outputs, an error, attempts or run: true", in.Node, in.Type, why)
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf("node %s has no stub in this case", in.Node), ErrNotStubbed, nil)
}

// answer returns attempt n's answer: the last one answers later attempts.
func (s *Stub) answer(n int) Attempt {
	return s.Attempts[min(n, len(s.Attempts))-1]
}

func (e *StubError) err() error {
	return temporal.NewApplicationErrorWithOptions(e.Message, e.Type, temporal.ApplicationErrorOptions{NonRetryable: !e.Retryable})
}

// activityFunc answers the nodes of an activity type t.
func (h *caseRun) activityFunc(t nodetype.Type) nodetype.Func {
	return func(ctx context.Context, in nodetype.Input) (out map[string]any, err error) {
		st, n := h.begin(in)
		defer func() { h.end(in.Node, err) }()
		switch {
		case st == nil:
			return nil, h.notStubbed(in, "")
		case st.Run:
			// Cancelled when the case runs out of wall-clock time, so that a
			// program that hangs is stopped (its process group killed).
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			h.mu.Lock()
			h.cancels = append(h.cancels, cancel)
			h.mu.Unlock()
			return t.Run(ctx, in)
		case len(st.Attempts) == 0:
			return nil, h.notStubbed(in, " of outputs or an error")
		}
		a := st.answer(n)
		if a.Error != nil {
			return nil, a.Error.err()
		}
		return maps.Clone(a.Outputs), nil
	}
}

// nodeWorkflow is the signature of a node type's child workflow.
type nodeWorkflow = func(workflow.Context, nodetype.Input) (nodetype.Result, error)

// childFunc answers the nodes of a workflow type t (or the nodes of an
// activity type that run as its workflow real: a train gang): its real
// workflow for a gate that runs or a canary stub, else the stub.
func (h *caseRun) childFunc(t nodetype.Type, real nodeWorkflow) nodeWorkflow {
	return func(ctx workflow.Context, in nodetype.Input) (res nodetype.Result, err error) {
		st, n := h.begin(in)
		defer func() { h.end(in.Node, err) }()
		switch {
		case st == nil:
			return nodetype.Result{}, h.notStubbed(in, "")
		case (st.Run || st.Canary != nil) && real != nil:
			if d := st.Approve; d != nil && t.NodeType.Name == gatenode.Name {
				id := workflow.GetInfo(ctx).WorkflowExecution.ID
				h.decideLater(in.Node, d, id, gatenode.ApproveSignal, gatenode.Approval{By: d.By, Reason: d.Reason})
			}
			return real(ctx, in)
		case len(st.Attempts) == 0:
			return nodetype.Result{}, h.notStubbed(in, " of outputs or an error")
		}
		a := st.answer(n)
		if a.Error != nil {
			return nodetype.Result{}, a.Error.err()
		}
		now := workflow.Now(ctx)
		return nodetype.Result{Outputs: maps.Clone(a.Outputs), Attempt: workflow.GetInfo(ctx).Attempt, StartedAt: now, EndedAt: now}, nil
	}
}

// decideLater signals a person's decision to a gate's or canary's
// workflow after a (skipped) while, as `retrain approve` would.
func (h *caseRun) decideLater(node string, d *Decision, workflowID, signal string, arg any) {
	h.mu.Lock()
	h.fired[d] = true
	h.mu.Unlock()
	h.env.RegisterDelayedCallback(func() {
		if err := h.env.SignalWorkflowByID(workflowID, signal, arg); err == nil {
			h.mu.Lock()
			h.delivered[d] = true
			h.mu.Unlock()
		}
	}, max(d.After, time.Second))
}

// unfired reports the decisions of stubs whose node ran but never got
// where its decision was to come (a canary that ended before the step).
func (h *caseRun) unfired() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.c.Stubs {
		for _, d := range []*Decision{s.Approve, s.Reject} {
			if d == nil || h.delivered[d] || h.attempts[s.Node] == 0 {
				continue
			}
			verb := "approve"
			if d == s.Reject {
				verb = "reject"
			}
			msg := fmt.Sprintf("node %s: the stubbed %s (%s in) never came: the node had ended before, not waiting for it", s.Node, verb, d.After)
			if !h.fired[d] {
				msg = fmt.Sprintf("node %s: the stubbed %s at step %d never came: the canary did not reach that step", s.Node, verb, d.Step)
			}
			{
				if !slices.Contains(h.problems, msg) {
					h.problems = append(h.problems, msg)
				}
			}
		}
	}
}

// registerCanary registers the canary's activities, answered by the
// node's canary stub: the registry (the versions), the webhooks (traffic,
// recorded) and Prometheus (the stub's values for the step baking).
func (h *caseRun) registerCanary(reg func(string, any)) {
	stubOf := func(in nodetype.Input) (*CanaryStub, error) {
		st := h.stub(in.Node)
		if st == nil || st.Canary == nil {
			return nil, h.notStubbed(in, " of a canary (canary: {steps: [...]})")
		}
		return st.Canary, nil
	}
	// Decisions are verified as a worker without an approvers list
	// verifies them: taken, and recorded as claimed by their sender.
	reg(canarynode.VerifyActivity, (&approvalnode.Activities{}).Verify)
	reg(canarynode.StartActivity, func(_ context.Context, in nodetype.Input) (canarynode.Plan, error) {
		cs, err := stubOf(in)
		if err != nil {
			return canarynode.Plan{}, err
		}
		plan, err := canarynode.PlanOf(in) // the start activity's own checks
		if err != nil {
			return canarynode.Plan{}, err
		}
		plan.Version, plan.Production, plan.CanaryPrevious = cs.Version, cs.Production, cs.Production
		plan.URI = "stub://" + plan.Model + "/" + cs.Version
		if t, err := time.Parse(time.RFC3339, in.LogicalTime); err == nil {
			plan.LogicalDate = t.Format(time.DateOnly)
		}
		for k := range cs.Steps {
			for name := range cs.Steps[k] {
				if !slices.ContainsFunc(plan.Spec.Checks, func(c canary.Check) bool { return c.Name == name }) {
					h.problem("node %s: canary stub step %d gives check %s, which the canary has not (its checks: %s)", in.Node, k+1, name, checkNames(plan.Spec))
				}
			}
		}
		return plan, nil
	})
	reg(canarynode.TrafficActivity, func(ctx context.Context, s canarynode.StepInput) (canarynode.WebhookCalls, error) {
		h.mu.Lock()
		h.traffic[s.In.Node] = append(h.traffic[s.In.Node], s.Split.Percent)
		h.steps[s.In.Node]++
		step := h.steps[s.In.Node]
		h.mu.Unlock()
		if st := h.stub(s.In.Node); st != nil {
			id := activity.GetInfo(ctx).WorkflowExecution.ID
			if d := st.Approve; d != nil && d.Step == step {
				h.decideLater(s.In.Node, d, id, canarynode.ApproveName, canarynode.Approval{By: d.By, Reason: d.Reason})
			}
			if d := st.Reject; d != nil && d.Step == step {
				h.decideLater(s.In.Node, d, id, canarynode.RejectName, canarynode.Approval{By: d.By, Reason: d.Reason})
			}
		}
		return canarynode.WebhookCalls{}, nil
	})
	reg(canarynode.EvaluateActivity, func(ctx context.Context, s canarynode.StepInput) ([]canary.Sample, error) {
		cs, err := stubOf(s.In)
		if err != nil {
			return nil, err
		}
		h.mu.Lock()
		step := h.steps[s.In.Node]
		h.mu.Unlock()
		if step < 1 || step > len(cs.Steps) {
			h.problem("node %s: the canary evaluates its checks at step %d, and its canary stub gives values for %d steps", s.In.Node, step, len(cs.Steps))
			return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("no stubbed values for step %d", step), ErrNotStubbed, nil)
		}
		values := cs.Steps[step-1]
		at := activity.GetInfo(ctx).StartedTime.UTC()
		out := make([]canary.Sample, len(s.Plan.Spec.Checks))
		for i, c := range s.Plan.Spec.Checks {
			v := values[c.Name] // absent: no data
			out[i] = canary.Sample{Time: at, Canary: v.Canary, Production: v.Production, Count: v.Count}
		}
		return out, nil
	})
	reg(canarynode.DecideActivity, func(_ context.Context, s canarynode.StepInput) (canarynode.Decided, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.traffic[s.In.Node] = append(h.traffic[s.In.Node], s.Split.Percent)
		return canarynode.Decided{Seq: 1}, nil
	})
	reg(canarynode.SeriesActivity, func(_ context.Context, s canarynode.StepInput) ([]canarynode.RangeSeries, error) {
		return make([]canarynode.RangeSeries, len(s.Plan.Spec.Checks)), nil
	})
	reg(canarynode.ProductionActivity, func(_ context.Context, s canarynode.StepInput) (canarynode.ProductionCheck, error) {
		return canarynode.ProductionCheck{Now: s.Plan.Production}, nil
	})
}

func checkNames(spec canary.Spec) string {
	var names []string
	for _, c := range spec.Checks {
		names = append(names, c.Name)
	}
	return strings.Join(names, ", ")
}

// waitingOn names the nodes a run that ran out of time was waiting on.
func (h *caseRun) waitingOn() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var parts []string
	for _, id := range slices.Sorted(maps.Keys(h.running)) {
		what := h.running[id]
		if step := h.steps[id]; step > 0 && what == "running" {
			what = fmt.Sprintf("baking step %d", step)
		}
		parts = append(parts, fmt.Sprintf("node %s (%s)", id, what))
	}
	if len(parts) == 0 {
		return "no node was running"
	}
	return "waiting on " + strings.Join(parts, ", ")
}
