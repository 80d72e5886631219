package canary

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/activities/approval"
	"github.com/retrain-ml/retrain/activities/models"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/canary"
	"github.com/retrain-ml/retrain/nodetype"
)

// finish carries out the decision (promote, or roll back) and returns
// the node's result: outputs on success, a non-retryable error carrying
// them on a rollback.
func (r *run) finish(ctx workflow.Context, started time.Time, decision, reason string) (nodetype.Result, error) {
	r.state.Phase = "deciding"
	promote := decision == Promoted || decision == Approved
	in := StepInput{In: r.in, Plan: r.plan, Promote: promote, Split: Split{Percent: 100, Event: Promoted}}
	in.Reason = fmt.Sprintf("canary %s by node %s of pipeline %s: %s", strings.ReplaceAll(decision, "_", " "), r.in.Node, r.in.Pipeline, reason)
	if !promote {
		in.Split = Split{Percent: 0, Event: RolledBack}
	}
	// The decision is carried out even when the run is being cancelled
	// (a cancelled canary is rolled back, not left serving its share):
	// on a context the cancellation does not reach. A registry it cannot
	// reach is retried under the node's policy.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	dctx = r.decideOptions(dctx)
	var d Decided
	err := workflow.ExecuteActivity(dctx, DecideActivity, in).Get(dctx, &d)
	r.countHooks(d.Results)
	r.out.Decision, r.out.Reason, r.out.DecidedBy = decision, reason, "checks"
	if r.human != nil {
		r.out.DecidedBy = r.who
	}
	r.out.RefusedApprovals = []string{}
	if r.keeper != nil && r.keeper.Refused != nil {
		r.out.RefusedApprovals = r.keeper.Refused
	}
	if d.Refused != "" {
		r.out.Decision = Refused
		r.out.Reason = "production moved while the canary baked, so it was not promoted and the canary was rolled back: " + d.Refused
	}
	if d.Superseded != "" {
		r.out.Decision, r.out.Reason = Superseded, d.Superseded
		r.out.SupersededBy, r.out.SupersededDate = d.SupersededBy, d.SupersededDate
	}
	r.candidateOutputs()
	if d.CanaryLeft != "" {
		r.out.Reason += "; " + d.CanaryLeft
	}
	r.series(ctx)
	r.out.Moved = promote && d.Refused == "" && err == nil
	r.out.Forced, r.out.Seq = r.out.Moved && d.Forced, d.Seq
	r.out.Breach = r.breach
	r.out.Webhooks, r.out.WebhooksFailed = r.hooks, r.failed
	r.out.Summary = r.summary()
	r.state.Phase, r.state.Decision = "done", r.out.Decision
	workflow.SetCurrentDetails(ctx, "**Canary "+strings.ReplaceAll(r.out.Decision, "_", " ")+"**: "+r.out.Reason)
	workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"decision": r.out.Decision}).Counter(MetricDecisions).Inc(1)
	workflow.GetLogger(ctx).Info("canary decided", "decision", r.out.Decision, "reason", r.out.Reason)

	outputs, oerr := nodetype.Outputs(r.out)
	if oerr != nil {
		return nodetype.Result{}, oerr
	}
	if err != nil {
		return nodetype.Result{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("canary %s of %s: the decision (%s) could not be carried out: %s", r.plan.Version, r.plan.Model, decision, nodetype.MessageOf(err)),
			errtype.CanaryRolledBack, nil, outputs)
	}
	switch {
	case r.out.Decision == Superseded:
		// Rolled back, and rightly not promoted: a newer version serves.
	case d.Refused != "" || decision == Refused:
		return nodetype.Result{}, temporal.NewNonRetryableApplicationError(r.out.Summary, errtype.ConcurrentMove, nil, outputs)
	case !promote:
		return nodetype.Result{}, temporal.NewNonRetryableApplicationError(r.out.Summary, errtype.CanaryRolledBack, nil, outputs)
	}
	return nodetype.Result{Outputs: outputs, Attempt: workflow.GetInfo(ctx).Attempt, StartedAt: started, EndedAt: workflow.Now(ctx)}, nil
}

func (r *run) summary() string {
	p := r.plan
	switch r.out.Decision {
	case Promoted, Approved:
		by := "every check passed"
		if r.out.Decision == Approved {
			by = approval.Phrase("approved", r.out.DecidedBy)
		}
		return fmt.Sprintf("%s %s: %s → %s after %d steps (%s)", p.Model, p.ProductionAlias, p.Production, p.Version, len(r.out.Steps), by)
	case Refused:
		return fmt.Sprintf("canary %s of %s not promoted: %s", p.Version, p.Model, r.out.Reason)
	case Superseded:
		return r.supersededSummary()
	case Rejected:
		return fmt.Sprintf("canary %s of %s rolled back: %s; %s stays at %s", p.Version, p.Model, r.out.Reason, p.ProductionAlias, p.Production)
	}
	return fmt.Sprintf("canary %s of %s rolled back: %s; %s stays at %s", p.Version, p.Model, r.out.Reason, p.ProductionAlias, p.Production)
}

func (r *run) countHooks(results []models.WebhookResult) {
	for _, h := range results {
		r.hooks++
		if h.Error != "" {
			r.failed++
		}
	}
}

// series reads each check's series over the whole canary, after the
// decision (which must not wait on it), for the report; best effort.
func (r *run) series(ctx workflow.Context) {
	if len(r.out.Steps) == 0 {
		return
	}
	timeout := time.Minute
	if r.clock.set() {
		// The decision is made; the report's series must not outlast the
		// run, whose timeout would hide it.
		timeout = min(timeout, r.clock.runEnd.Add(-2*time.Second).Sub(workflow.Now(ctx)))
		if timeout < 3*time.Second {
			return
		}
	}
	sctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: timeout, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 2},
	})
	var rs []RangeSeries
	in := StepInput{In: r.in, Plan: r.plan, From: r.out.Steps[0].Started}
	if err := workflow.ExecuteActivity(sctx, SeriesActivity, in).Get(ctx, &rs); err != nil {
		workflow.GetLogger(ctx).Warn("canary series not read", "error", err)
		return
	}
	for k := range r.out.Series {
		if k < len(rs) {
			r.out.Series[k].Range = rs[k]
		}
	}
}

// newSeries are the outputs' series, one per check, without points yet.
func (r *run) newSeries() []Series {
	p := r.plan
	out := make([]Series, len(p.Spec.Checks))
	for k, c := range p.Spec.Checks {
		s := Series{
			Check: c.Name, Query: canary.QueryFor(c.Query, p.Version, p.Alias), Threshold: c.ThresholdText(),
			Max: c.Threshold.Max, Min: c.Threshold.Min, Relative: c.Threshold.MinRelativeChange,
			Absolute: c.Threshold.MinAbsoluteChange, Direction: string(c.Threshold.Direction),
			Points: []canary.Sample{}, Steps: []int{},
		}
		if c.Relative() {
			s.ProductionQuery = canary.QueryFor(c.Query, p.Production, p.ProductionAlias)
		}
		out[k] = s
	}
	return out
}

// addPoint records a sample of check k at step i, thinning the series
// when it is full.
func (r *run) addPoint(k, i int, s canary.Sample, status canary.Status) {
	ser := &r.out.Series[k]
	if len(ser.Points) >= maxPoints {
		var pts []canary.Sample
		var steps []int
		var outs []string
		for j := 0; j < len(ser.Points); j += 2 {
			pts, steps = append(pts, ser.Points[j]), append(steps, ser.Steps[j])
			if j < len(ser.Outcomes) {
				outs = append(outs, ser.Outcomes[j])
			}
		}
		ser.Points, ser.Steps, ser.Outcomes = pts, steps, outs
	}
	ser.Points = append(ser.Points, s)
	ser.Steps = append(ser.Steps, i)
	if r.tolerant {
		ser.Outcomes = append(ser.Outcomes, string(status))
	}
}

// showDetails is what the Web UI shows on the canary's page while it
// bakes (memory only: replay is unaffected).
func (r *run) showDetails(ctx workflow.Context, next time.Time) {
	now := workflow.Now(ctx)
	var b strings.Builder
	fmt.Fprintf(&b, "**Canary %s of %s: step %d of %d, %s%% of traffic**, bake ends %s UTC (%s left); next check at %s UTC.\n\n",
		r.plan.Version, r.plan.Model, r.state.Step, r.state.Steps, fmtPct(r.state.Percent),
		r.state.BakeEnds.UTC().Format(time.DateTime), r.state.BakeEnds.Sub(now).Round(time.Second), next.UTC().Format(time.TimeOnly))
	for _, c := range r.state.Checks {
		fmt.Fprintf(&b, "- %s: %s (canary %s, production %s) %s\n", c.Name, c.Status, fmtVal(c.Canary), fmtVal(c.Production), c.Reason)
	}
	run := r.in.RunID
	fmt.Fprintf(&b, "\nPromote now: `retrain approve %s --node %s --reason \"...\"`; roll back now: `retrain reject %s --node %s --reason \"...\"`.\n", run, r.in.Node, run, r.in.Node)
	workflow.SetCurrentDetails(ctx, b.String())
}

func fmtPct(p float64) string { return strconv.FormatFloat(p, 'g', -1, 64) }

func fmtVal(v *float64) string {
	if v == nil {
		return "no data"
	}
	return strconv.FormatFloat(*v, 'g', 5, 64)
}
