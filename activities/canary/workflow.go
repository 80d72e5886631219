package canary

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	lakenode "github.com/retrain-ml/retrain/activities/lake"
	"github.com/retrain-ml/retrain/internal/canary"
	"github.com/retrain-ml/retrain/nodetype"
)

// State is what the canary query returns: where the canary is.
type State struct {
	Phase    string        `json:"phase"` // starting, baking, deciding, done
	Step     int           `json:"step"`  // 1-based
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
	reject  bool
	hooks   int
	failed  int
	breach  *BreachRecord
	stepRec *StepRecord
}

// Canary runs a canary node; see the package documentation.
func Canary(ctx workflow.Context, in nodetype.Input) (nodetype.Result, error) {
	started := workflow.Now(ctx)
	ctx = workflow.WithActivityOptions(ctx, lakenode.NodeActivityOptions(in.Options))
	r := &run{in: in, state: State{Phase: "starting"}}
	if err := workflow.SetQueryHandler(ctx, StateQuery, func() (State, error) { return r.state, nil }); err != nil {
		return nodetype.Result{}, err
	}
	if err := workflow.ExecuteActivity(ctx, StartActivity, in).Get(ctx, &r.plan); err != nil {
		return nodetype.Result{}, err // nothing moved, or the canary alias alone, to the candidate
	}
	if err := r.listen(ctx); err != nil {
		return nodetype.Result{}, err
	}
	p := r.plan
	r.out = Outputs{
		Model: p.Model, Version: p.Version, Ref: p.Model + "@" + p.Version, Alias: p.Alias,
		ProductionAlias: p.ProductionAlias, PreviousVersion: p.Production, Steps: []StepRecord{}, Series: r.newSeries(),
	}
	r.state.Steps, r.state.Version = len(p.Spec.Steps), p.Version
	if p.SupersededBy != "" {
		return r.notStarted(ctx, started) // registered; no traffic sent
	}

	decision, reason := r.walk(ctx)
	return r.finish(ctx, started, decision, reason)
}

// listen takes a human's approval or rejection, by update or signal.
func (r *run) listen(ctx workflow.Context) error {
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
		take := func(a Approval) {
			r.human, r.reject = &a, reject
		}
		err := workflow.SetUpdateHandlerWithOptions(ctx, name, func(ctx workflow.Context, a Approval) (string, error) {
			if err := valid(a); err != nil {
				return "", err
			}
			take(a)
			verb := "approved by %s: promoting %s to %s now"
			if reject {
				verb = "rejected by %s: rolling %s back now; %s stays"
			}
			return fmt.Sprintf("canary %s "+verb, workflow.GetInfo(ctx).WorkflowExecution.ID, a.By, r.plan.Version, r.plan.ProductionAlias), nil
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
				take(a)
			}
		})
	}
	return nil
}

// walk goes through the steps and returns the decision: promoted,
// approved, rolled_back or rejected, with why.
func (r *run) walk(ctx workflow.Context) (string, string) {
	spec := r.plan.Spec
	for i, step := range spec.Steps {
		if d, why, done := r.humanDecision(); done {
			return d, why
		}
		if d, why := r.checkProduction(ctx, i); d != "" {
			return d, why // production moved: no more traffic to the candidate
		}
		r.stepRec = &StepRecord{Percent: step.Percent, Bake: step.Bake.String(), Started: workflow.Now(ctx), Outcome: "not_baked", Checks: []CheckRecord{}}
		r.state.Phase, r.state.Step, r.state.Percent = "baking", i+1, step.Percent
		r.state.BakeEnds = r.stepRec.Started.Add(step.Bake)
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
	return Promoted, fmt.Sprintf("every check passed at each of %d steps", len(spec.Steps))
}

func (r *run) humanDecision() (string, string, bool) {
	if r.human == nil {
		return "", "", false
	}
	if r.reject {
		return Rejected, fmt.Sprintf("rejected by %s: %s", r.human.By, r.human.Reason), true
	}
	return Approved, fmt.Sprintf("approved by %s: %s", r.human.By, r.human.Reason), true
}

func (r *run) endStep(ctx workflow.Context) {
	r.stepRec.Ended = workflow.Now(ctx)
	r.out.Steps = append(r.out.Steps, *r.stepRec)
}

// bake holds step i for its bake, evaluating the checks every interval,
// and returns a decision if one was taken before the bake passed.
func (r *run) bake(ctx workflow.Context, i int, step canary.Step) (string, string) {
	spec := r.plan.Spec
	end := r.stepRec.Started.Add(step.Bake)
	tallies := make([]canary.Tally, len(spec.Checks))
	var lastSamples []canary.Sample
	for {
		now := workflow.Now(ctx)
		next := now.Add(spec.Interval)
		if next.After(end) {
			next = end
		}
		r.showDetails(ctx, next)
		if _, err := workflow.AwaitWithTimeout(ctx, next.Sub(now), func() bool { return r.human != nil }); err != nil {
			return RolledBack, "the bake was interrupted: " + err.Error()
		}
		if d, why, done := r.humanDecision(); done {
			r.stepRec.Outcome = d
			r.recordChecks(tallies, lastSamples)
			return d, why
		}
		var samples []canary.Sample
		if err := workflow.ExecuteActivity(ctx, EvaluateActivity, StepInput{In: r.in, Plan: r.plan}).Get(ctx, &samples); err != nil {
			// Fail closed: a canary whose checks cannot run is not promoted.
			r.stepRec.Outcome = "breached"
			msg := fmt.Sprintf("checks could not be evaluated at step %d (%s%%): %s", i+1, fmtPct(step.Percent), nodetype.MessageOf(err))
			r.breach = &BreachRecord{Check: "(evaluation)", Step: i + 1, Percent: step.Percent, Reason: nodetype.MessageOf(err)}
			r.recordChecks(tallies, lastSamples)
			return RolledBack, msg
		}
		lastSamples = samples
		for k, c := range spec.Checks {
			j := canary.Judge(c, samples[k])
			tallies[k].Add(j)
			r.addPoint(k, i, samples[k])
			if j.Status == canary.Breach && r.breach == nil {
				r.breach = r.breachOf(c, i, step, samples[k], j)
			}
		}
		if workflow.Now(ctx).Before(end) && r.breach == nil {
			r.recordChecks(tallies, lastSamples)
			continue
		}
		if r.breach == nil {
			for k, c := range spec.Checks {
				if j := canary.StepEnd(c, tallies[k]); j.Status != canary.Pass {
					tallies[k].Breached, tallies[k].Last = true, j
					r.breach = r.breachOf(c, i, step, samples[k], j)
					break
				}
			}
		}
		r.recordChecks(tallies, lastSamples)
		if r.breach != nil {
			r.stepRec.Outcome = "breached"
			b := r.breach
			return RolledBack, fmt.Sprintf("check %s breached at step %d (%s%% of traffic): %s; canary %s, production %s; query: %s",
				b.Check, b.Step, fmtPct(b.Percent), b.Reason, fmtVal(b.Canary), fmtVal(b.Production), b.Query)
		}
		return "", ""
	}
}

func (r *run) breachOf(c canary.Check, i int, step canary.Step, s canary.Sample, j canary.Judgement) *BreachRecord {
	b := &BreachRecord{
		Check: c.Name, Step: i + 1, Percent: step.Percent, Reason: j.Reason, Canary: s.Canary, Production: s.Production,
		Query: canary.QueryFor(c.Query, r.plan.Version, r.plan.Alias),
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
		recs[k] = CheckRecord{Name: c.Name, Status: string(t.Last.Status), Reason: t.Last.Reason, Samples: t.Samples, Passed: t.Passed}
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
	if err := workflow.ExecuteActivity(ctx, TrafficActivity, StepInput{In: r.in, Plan: r.plan, Split: s}).Get(ctx, &calls); err != nil {
		workflow.GetLogger(ctx).Warn("canary traffic webhook step failed", "error", err)
	}
	r.countHooks(calls.Results)
}
