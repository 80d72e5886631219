package canary

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/activities/approval"
	lakenode "github.com/retrain-ml/retrain/activities/lake"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/canary"
	"github.com/retrain-ml/retrain/nodetype"
)

// State is what the canary query returns: where the canary is.
type State struct {
	Phase string `json:"phase"` // starting, baking, paused (inconclusive: waiting for a person), deciding, done
	// Refused says the latest approvals or rejections the worker refused
	// (unsigned, badly signed, an unknown name), newest last.
	Refused  []string      `json:"refused,omitempty"`
	Step     int           `json:"step"` // 1-based
	Steps    int           `json:"steps"`
	Percent  float64       `json:"percent"`
	BakeEnds time.Time     `json:"bake_ends"`
	Version  string        `json:"version"`
	Checks   []CheckRecord `json:"checks"`
	Decision string        `json:"decision"`
}

// Approval is a human's decision on a canary: approve (promote now) or
// reject (roll back now), with who and why. Its JSON is the gate's
// approval's.
type Approval struct {
	By     string `json:"by"`
	Reason string `json:"reason"`
	// At and Signature sign the decision with the approver's key (see
	// internal/approval); a worker with an approvers list takes only
	// signed decisions.
	At        string `json:"at,omitempty"`
	Signature string `json:"signature,omitempty"`
}

// maxPoints bounds the samples a series keeps in the outputs (history
// payloads are capped at 2 MB): past it, every other one is dropped.
const maxPoints = 240

// run is one canary's state in its workflow.
type run struct {
	in      nodetype.Input
	plan    Plan
	out     Outputs
	state   State
	human   *Approval
	who     string // how the human is recorded: a verified name, or "claimed by NAME"
	reject  bool
	keeper  *approval.Keeper
	hooks   int
	failed  int
	breach  *BreachRecord
	stepRec *StepRecord
	// tolerant: the checks count failure_limit, warmup and inconclusive
	// steps, and the canary keeps its deadline; false in histories
	// recorded before (every breach rolled back at once).
	tolerant bool
	clock    clock
	tallies  []canary.Tally // each check's, in the step baking
	totals   []canary.Tally // each check's over the whole canary
}

// tolerantChange marks canaries whose checks tolerate live metrics
// (failure_limit, warmup, inconclusive pauses) and that keep their own
// deadline.
const tolerantChange = "canary-tolerant-checks"

// Canary runs a canary node; see the package documentation.
func Canary(ctx workflow.Context, in nodetype.Input) (nodetype.Result, error) {
	started := workflow.Now(ctx)
	ctx = workflow.WithActivityOptions(ctx, lakenode.NodeActivityOptions(in.Options))
	r := &run{in: in, state: State{Phase: "starting"}}
	if err := workflow.SetQueryHandler(ctx, StateQuery, func() (State, error) { return r.state, nil }); err != nil {
		return nodetype.Result{}, err
	}
	r.tolerant = workflow.GetVersion(ctx, tolerantChange, workflow.DefaultVersion, 1) >= 1
	sctx := ctx
	if r.tolerant {
		r.clock = newClock(ctx, in)
		// A cancellation while the canary alias moves waits for the move,
		// so that the rollback below knows what to undo.
		sctx = r.bounded(ctx, 0, r.clock.deadline)
		sctx = workflow.WithWaitForCancellation(sctx, true)
	}
	if err := workflow.ExecuteActivity(sctx, StartActivity, in).Get(sctx, &r.plan); err != nil {
		return nodetype.Result{}, err // nothing moved, or the canary alias alone, to the candidate
	}
	if err := r.listen(ctx); err != nil {
		return nodetype.Result{}, err
	}
	p := r.plan
	r.out = Outputs{
		Model: p.Model, Version: p.Version, Ref: p.Model + "@" + p.Version, Alias: p.Alias,
		ProductionAlias: p.ProductionAlias, PreviousVersion: p.Production, Steps: []StepRecord{}, Series: r.newSeries(),
		RefusedApprovals: []string{},
	}
	r.state.Steps, r.state.Version = len(p.Spec.Steps), p.Version
	r.totals = make([]canary.Tally, len(p.Spec.Checks))
	if p.SupersededBy != "" {
		return r.notStarted(ctx, started) // registered; no traffic sent
	}

	decision, reason := r.walk(ctx)
	return r.finish(ctx, started, decision, reason)
}

// cancelled says why a canary whose context is done stops: its run was
// cancelled, or terminated (which cancels it, see the pipeline's child
// options), or timed out.
func cancelled(ctx workflow.Context, i int, step canary.Step) (string, string) {
	return RolledBack, fmt.Sprintf("the canary was cancelled at step %d (%s%% of traffic): rolled back to production", i+1, fmtPct(step.Percent))
}

// listen takes a human's approval or rejection, by update or signal. The
// worker verifies who sent it (activities/approval): a refused decision
// changes nothing, and the canary keeps baking.
func (r *run) listen(ctx workflow.Context) error {
	r.keeper = approval.NewKeeper(ctx, VerifyActivity)
	valid := func(a Approval) error {
		switch {
		case r.human != nil || r.state.Phase == "done" || r.state.Phase == "deciding":
			return errors.New("the canary has decided already")
		case strings.TrimSpace(a.By) == "":
			return errors.New("say who decides")
		case strings.TrimSpace(a.Reason) == "":
			return errors.New("give a reason: it is recorded")
		}
		return nil
	}
	for _, name := range []string{ApproveName, RejectName} {
		reject := name == RejectName
		// take verifies a and, when the worker takes it and the canary
		// has not decided meanwhile, makes it the decision.
		take := func(ctx workflow.Context, a Approval) (string, error) {
			who, refusal := r.keeper.Check(ctx, name, approval.Decision{By: a.By, Reason: a.Reason, At: a.At, Signature: a.Signature})
			if refusal != "" {
				r.state.Refused = r.keeper.Refused
				return "", errors.New(refusal)
			}
			if err := valid(a); err != nil {
				return "", err
			}
			r.human, r.who, r.reject = &a, who, reject
			return who, nil
		}
		err := workflow.SetUpdateHandlerWithOptions(ctx, name, func(ctx workflow.Context, a Approval) (string, error) {
			if err := valid(a); err != nil {
				return "", err
			}
			who, err := take(ctx, a)
			if err != nil {
				return "", err
			}
			verb := approval.Phrase("approved", who) + ": promoting %s to %s now"
			if reject {
				verb = approval.Phrase("rejected", who) + ": rolling %s back now; %s stays"
			}
			return fmt.Sprintf("canary %s "+verb, workflow.GetInfo(ctx).WorkflowExecution.ID, r.plan.Version, r.plan.ProductionAlias), nil
		}, workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, a Approval) error { return valid(a) }})
		if err != nil {
			return err
		}
		ch := workflow.GetSignalChannel(ctx, name)
		workflow.Go(ctx, func(ctx workflow.Context) {
			for {
				var a Approval
				if !ch.Receive(ctx, &a) {
					return
				}
				if err := valid(a); err != nil {
					workflow.GetLogger(ctx).Warn("canary signal ignored", "signal", name, "error", err)
					continue
				}
				if _, err := take(ctx, a); err != nil {
					workflow.GetLogger(ctx).Warn("canary signal ignored", "signal", name, "error", err)
				}
			}
		})
	}
	return nil
}

// walk goes through the steps and returns the decision: promoted,
// approved, rolled_back or rejected, with why.
func (r *run) walk(ctx workflow.Context) (string, string) {
	spec := r.plan.Spec
	r.tallies = make([]canary.Tally, len(spec.Checks))
	for i, step := range spec.Steps {
		if d, why, done := r.humanDecision(); done {
			return d, why
		}
		if r.tolerant && ctx.Err() != nil {
			return cancelled(ctx, i, step)
		}
		if d, why := r.checkProduction(ctx, i); d != "" {
			return d, why // production moved: no more traffic to the candidate
		}
		r.stepRec = &StepRecord{Percent: step.Percent, Bake: step.Bake.String(), Started: workflow.Now(ctx), Outcome: "not_baked", Checks: []CheckRecord{}}
		r.state.Phase, r.state.Step, r.state.Percent = "baking", i+1, step.Percent
		r.state.BakeEnds = r.stepRec.Started.Add(step.Bake)
		if r.tolerant {
			if step.Warmup > 0 {
				r.stepRec.Warmup = step.Warmup.String()
			}
			// A step that cannot end by the deadline is not started: the
			// canary decides now, while serving can still be told.
			if step.Bake > 0 && r.clock.passed(r.state.BakeEnds) {
				r.stepRec.Outcome = "out_of_time"
				r.endStep(ctx)
				return r.outOfTime(i, step, fmt.Sprintf("step %d's bake of %s would end at %s UTC, past the deadline", i+1, step.Bake, r.state.BakeEnds.UTC().Format(time.TimeOnly)))
			}
		}
		last := i == len(spec.Steps)-1
		if last && step.Bake == 0 {
			// The last step without a bake is the promotion itself, whose
			// webhook says 100%.
			r.stepRec.Outcome = "promotion"
		} else {
			r.traffic(ctx, Split{Percent: step.Percent, Event: "step"})
		}
		if step.Bake > 0 {
			if d, why := r.bake(ctx, i, step); d != "" {
				r.endStep(ctx)
				return d, why
			}
			r.stepRec.Outcome = "passed"
		}
		r.endStep(ctx)
	}
	return Promoted, fmt.Sprintf("every check passed at each of %d steps%s", len(spec.Steps), r.counted())
}

// counted says which evaluations a decision counted, per check.
func (r *run) counted() string {
	if !r.tolerant {
		return ""
	}
	var b strings.Builder
	for k, c := range r.plan.Spec.Checks {
		t := r.totals[k]
		sep := "; "
		if k == 0 {
			sep = " ("
		}
		fmt.Fprintf(&b, "%s%s: %d evaluations, %d passed, %d breached, %d inconclusive", sep, c.Name, t.Samples, t.Passed, t.Breaches, t.Inconclusive)
	}
	if b.Len() > 0 {
		b.WriteString(")")
	}
	return b.String()
}

// outOfTime is the decision of a canary that would pass its deadline.
func (r *run) outOfTime(i int, step canary.Step, what string) (string, string) {
	reason := fmt.Sprintf("out of time at step %d (%s%% of traffic): %s; %s", i+1, fmtPct(step.Percent), what, r.clock.why())
	r.breach = &BreachRecord{Check: "(deadline)", Step: i + 1, Percent: step.Percent, Reason: reason}
	return RolledBack, "the canary ran " + reason
}

func (r *run) humanDecision() (string, string, bool) {
	if r.human == nil {
		return "", "", false
	}
	if r.reject {
		return Rejected, fmt.Sprintf("%s: %s", approval.Phrase("rejected", r.who), r.human.Reason), true
	}
	return Approved, fmt.Sprintf("%s: %s", approval.Phrase("approved", r.who), r.human.Reason), true
}

func (r *run) endStep(ctx workflow.Context) {
	r.stepRec.Ended = workflow.Now(ctx)
	r.out.Steps = append(r.out.Steps, *r.stepRec)
}

// bake holds step i for its bake, evaluating the checks every interval,
// and returns a decision if one was taken before the bake passed.
func (r *run) bake(ctx workflow.Context, i int, step canary.Step) (string, string) {
	spec := r.plan.Spec
	start := r.stepRec.Started
	end := start.Add(step.Bake)
	for k := range r.tallies {
		if r.tolerant {
			r.tallies[k] = r.tallies[k].Next() // a streak of breaches goes on
		} else {
			r.tallies[k] = canary.Tally{}
		}
	}
	tallies := r.tallies
	var lastSamples []canary.Sample
	evaluated := 0
	for {
		now := workflow.Now(ctx)
		next := now.Add(spec.Interval)
		if next.After(end) {
			next = end
		}
		if r.tolerant && r.clock.passed(next) {
			next = r.clock.deadline
		}
		r.showDetails(ctx, next)
		if _, err := workflow.AwaitWithTimeout(ctx, next.Sub(now), func() bool { return r.human != nil }); err != nil {
			r.recordChecks(tallies, lastSamples)
			if r.tolerant {
				return cancelled(ctx, i, step)
			}
			return RolledBack, "the bake was interrupted: " + err.Error()
		}
		if d, why, done := r.humanDecision(); done {
			r.stepRec.Outcome = d
			r.recordChecks(tallies, lastSamples)
			return d, why
		}
		if r.tolerant && r.clock.passed(workflow.Now(ctx)) {
			r.stepRec.Outcome = "out_of_time"
			r.recordChecks(tallies, lastSamples)
			return r.outOfTime(i, step, "the bake had not ended (slow evaluations or webhooks)")
		}
		at := workflow.Now(ctx)
		samples, err := r.evaluate(ctx, next)
		if err != nil {
			if r.tolerant && ctx.Err() != nil {
				r.recordChecks(tallies, lastSamples)
				return cancelled(ctx, i, step)
			}
			if !r.tolerant || permanent(err) {
				// Fail closed: a canary whose checks cannot run (a query
				// Prometheus refuses) is not promoted.
				r.stepRec.Outcome = "breached"
				msg := fmt.Sprintf("checks could not be evaluated at step %d (%s%%): %s", i+1, fmtPct(step.Percent), nodetype.MessageOf(err))
				r.breach = &BreachRecord{Check: "(evaluation)", Step: i + 1, Percent: step.Percent, Reason: nodetype.MessageOf(err)}
				r.recordChecks(tallies, lastSamples)
				return RolledBack, msg
			}
			// An evaluation that failed (Prometheus unreachable or slow,
			// after the node's retries) counts as a breach of every check:
			// fail closed, within failure_limit.
			samples = make([]canary.Sample, len(spec.Checks))
			for k := range samples {
				samples[k] = canary.Sample{Time: at.UTC()}
			}
			r.judgeAll(i, step, samples, at, evaluated, "the checks could not be evaluated: "+nodetype.MessageOf(err))
		} else {
			lastSamples = samples
			r.judgeAll(i, step, samples, at, evaluated, "")
		}
		evaluated++
		if r.tolerant && r.clock.passed(workflow.Now(ctx)) && r.breach == nil {
			r.stepRec.Outcome = "out_of_time"
			r.recordChecks(tallies, lastSamples)
			return r.outOfTime(i, step, "the evaluation ended past the deadline")
		}
		if workflow.Now(ctx).Before(end) && r.breach == nil {
			r.recordChecks(tallies, lastSamples)
			continue
		}
		var inconclusive []string
		if r.breach == nil {
			for k, c := range spec.Checks {
				j := r.stepEnd(c, tallies[k])
				switch j.Status {
				case canary.Pass:
					continue
				case canary.Inconclusive:
					tallies[k].Last = j
					inconclusive = append(inconclusive, c.Name+": "+j.Reason)
					continue
				}
				tallies[k].Breached, tallies[k].Last = true, j
				s := canary.Sample{}
				if k < len(lastSamples) {
					s = lastSamples[k]
				}
				r.breach = r.breachOf(c, k, i, step, s, j)
				break
			}
		}
		r.recordChecks(tallies, lastSamples)
		if r.breach != nil {
			r.stepRec.Outcome = "breached"
			b := r.breach
			return RolledBack, fmt.Sprintf("check %s breached at step %d (%s%% of traffic): %s; canary %s, production %s; query: %s",
				b.Check, b.Step, fmtPct(b.Percent), b.Reason, fmtVal(b.Canary), fmtVal(b.Production), b.Query)
		}
		if len(inconclusive) > 0 {
			return r.pause(ctx, i, step, inconclusive)
		}
		return "", ""
	}
}

// evaluate runs the checks once, its attempts bounded by the step's next
// evaluation or the deadline.
func (r *run) evaluate(ctx workflow.Context, next time.Time) ([]canary.Sample, error) {
	ectx := ctx
	if r.tolerant {
		attempt := max(2*r.plan.Spec.Interval, 30*time.Second)
		ectx = r.bounded(ctx, attempt, r.clock.deadline)
	}
	var samples []canary.Sample
	err := workflow.ExecuteActivity(ectx, EvaluateActivity, StepInput{In: r.in, Plan: r.plan}).Get(ectx, &samples)
	if err == nil && len(samples) != len(r.plan.Spec.Checks) {
		err = nodetype.Permanent(errtype.BadInput, "the evaluation returned %d samples for %d checks", len(samples), len(r.plan.Spec.Checks))
	}
	return samples, err
}

// judgeAll judges and counts one evaluation of every check at step i (its
// evaluated-th): failed says why the evaluation itself failed (every
// check breaches), "" when it ran.
func (r *run) judgeAll(i int, step canary.Step, samples []canary.Sample, at time.Time, evaluated int, failed string) {
	for k, c := range r.plan.Spec.Checks {
		var j canary.Judgement
		if failed != "" {
			j = canary.Judgement{Status: canary.Breach, Reason: failed}
		} else {
			j = canary.Judge(c, samples[k])
		}
		limit := 1
		if r.tolerant {
			j = canary.Excuse(j, canary.Grace(c, step, at.Sub(r.stepRec.Started), evaluated))
			limit = c.Limit()
		}
		r.tallies[k].Count(j, at, limit)
		r.totals[k].Count(j, at, limit)
		r.addPoint(k, i, samples[k], j.Status)
		if r.tallies[k].Breached && r.breach == nil {
			r.breach = r.breachOf(c, k, i, step, samples[k], j)
		}
	}
}

// stepEnd is a check's verdict when its step's bake ended.
func (r *run) stepEnd(c canary.Check, t canary.Tally) canary.Judgement {
	if !r.tolerant {
		return canary.StepEnd(c, t)
	}
	j := canary.Verdict(c, t)
	if j.Status == canary.Inconclusive && r.plan.Spec.InconclusiveTimeout <= 0 {
		j.Status = canary.Breach // no pause: fail closed
	}
	return j
}

// pause holds an inconclusive step for a person: retrain approve
// promotes, retrain reject rolls back; nobody within
// inconclusive_timeout (or by the deadline) rolls back, the safe side.
func (r *run) pause(ctx workflow.Context, i int, step canary.Step, why []string) (string, string) {
	r.stepRec.Outcome = "inconclusive"
	r.state.Phase = "paused"
	now := workflow.Now(ctx)
	wait := r.plan.Spec.InconclusiveTimeout
	byDeadline := false
	if r.clock.set() && now.Add(wait).After(r.clock.deadline) {
		wait, byDeadline = max(r.clock.deadline.Sub(now), 0), true
	}
	reasons := strings.Join(why, "; ")
	r.state.BakeEnds = now.Add(wait)
	var b strings.Builder
	fmt.Fprintf(&b, "**Canary %s of %s paused at step %d of %d (%s%% of traffic): inconclusive.** %s\n\n", r.plan.Version, r.plan.Model, i+1, r.state.Steps, fmtPct(step.Percent), reasons)
	fmt.Fprintf(&b, "Promote: `retrain approve %s --node %s --reason \"...\"`; roll back: `retrain reject %s --node %s --reason \"...\"`. Without either by %s UTC it rolls back.\n",
		r.in.RunID, r.in.Node, r.in.RunID, r.in.Node, r.state.BakeEnds.UTC().Format(time.DateTime))
	workflow.SetCurrentDetails(ctx, b.String())
	workflow.GetLogger(ctx).Warn("canary inconclusive: waiting for approve or reject", "step", i+1, "wait", wait, "why", reasons)
	if _, err := workflow.AwaitWithTimeout(ctx, wait, func() bool { return r.human != nil }); err != nil {
		return cancelled(ctx, i, step)
	}
	if d, why, done := r.humanDecision(); done {
		return d, why
	}
	limit := fmt.Sprintf("inconclusive_timeout %s", r.plan.Spec.InconclusiveTimeout)
	if byDeadline {
		limit = r.clock.why()
	}
	reason := fmt.Sprintf("step %d (%s%% of traffic) was inconclusive (%s) and nobody approved or rejected it by %s UTC (%s): rolled back",
		i+1, fmtPct(step.Percent), reasons, r.state.BakeEnds.UTC().Format(time.TimeOnly), limit)
	r.breach = &BreachRecord{Check: "(inconclusive)", Step: i + 1, Percent: step.Percent, Reason: reason}
	return RolledBack, reason
}

func (r *run) breachOf(c canary.Check, k, i int, step canary.Step, s canary.Sample, j canary.Judgement) *BreachRecord {
	b := &BreachRecord{
		Check: c.Name, Step: i + 1, Percent: step.Percent, Reason: j.Reason, Canary: s.Canary, Production: s.Production,
		Query: canary.QueryFor(c.Query, r.plan.Version, r.plan.Alias),
	}
	if r.tolerant {
		t := r.tallies[k]
		b.FailureLimit, b.Evaluations = c.Limit(), slices.Clone(t.Streak)
		if len(t.Streak) > 0 {
			b.Reason = fmt.Sprintf("%d consecutive breached evaluations of failure_limit %d (from %s to %s UTC): %s", len(t.Streak), c.Limit(),
				t.Streak[0].UTC().Format(time.TimeOnly), t.Streak[len(t.Streak)-1].UTC().Format(time.TimeOnly), j.Reason)
		}
	}
	if c.Relative() {
		b.ProductionQuery = canary.QueryFor(c.Query, r.plan.Production, r.plan.ProductionAlias)
	}
	return b
}

// recordChecks sets the step's check records (and the query's) to the
// tallies' state: the values at decision time.
func (r *run) recordChecks(tallies []canary.Tally, samples []canary.Sample) {
	recs := make([]CheckRecord, len(tallies))
	for k, c := range r.plan.Spec.Checks {
		t := tallies[k]
		recs[k] = CheckRecord{Name: c.Name, Status: string(t.Last.Status), Reason: t.Last.Reason, Samples: t.Samples, Passed: t.Passed,
			Breaches: t.Breaches, Inconclusive: t.Inconclusive, Streak: len(t.Streak)}
		if r.tolerant {
			recs[k].FailureLimit = c.Limit()
		}
		if t.Breached {
			recs[k].Status = string(canary.Breach)
		}
		if k < len(samples) {
			recs[k].Canary, recs[k].Production, recs[k].Count = samples[k].Canary, samples[k].Production, samples[k].Count
		}
	}
	r.stepRec.Checks = recs
	r.state.Checks = recs
}

func (r *run) traffic(ctx workflow.Context, s Split) {
	var calls WebhookCalls
	tctx := ctx
	if r.tolerant {
		// Each attempt has the time its webhooks may take; all of them end
		// by the deadline.
		tctx = r.bounded(ctx, webhookBudget(r.webhookAttempts()), r.clock.deadline)
	}
	if err := workflow.ExecuteActivity(tctx, TrafficActivity, StepInput{In: r.in, Plan: r.plan, Split: s}).Get(tctx, &calls); err != nil {
		workflow.GetLogger(ctx).Warn("canary traffic webhook step failed", "error", err)
	}
	r.countHooks(calls.Results)
}

// webhookAttempts is the node's webhook_attempts (3 when unset).
func (r *run) webhookAttempts() int {
	switch n := r.in.With["webhook_attempts"].(type) {
	case float64:
		return max(int(n), 1)
	case int:
		return max(n, 1)
	case int64:
		return max(int(n), 1)
	}
	return 3
}

// permanent reports whether an activity's error is one a retry would get
// again: a query Prometheus refuses, a credential refused as written.
func permanent(err error) bool {
	ae, ok := errors.AsType[*temporal.ApplicationError](err)
	return ok && (ae.NonRetryable() || ae.Type() == errtype.BadInput)
}
