package canary

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/activities/models"
	regmodels "github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/nodetype"
)

// This file holds how a canary follows the registry's rule that
// production never moves back in date: a candidate older than production
// does not start, and a canary whose production is replaced meanwhile
// stops at the next step.

// productionCheckChange versions the check of production at each step:
// histories recorded before it have no CanaryProduction activities.
const productionCheckChange = "canary-production-check"

// promotion is the move of production this canary ends in when it
// passes: by compare-and-swap from the version production named when
// the canary started, under the registry's date rule.
func (p Plan) promotion(by regmodels.Actor, reason string) regmodels.MoveRequest {
	return regmodels.MoveRequest{
		Model: p.Model, Alias: p.ProductionAlias, To: p.Version, IfFrom: true, From: p.Production,
		Force: p.Force, By: by, Reason: reason,
	}
}

// ProductionCheck is what production names now, against what the canary
// started with.
type ProductionCheck struct {
	// Now is the version production names now; Moved is set when it is
	// not the one the canary started against.
	Now   string `json:"now,omitempty"`
	Moved bool   `json:"moved,omitempty"`
	// Superseded says why, when production now names a version trained
	// for a later logical date than the candidate (SupersededBy, of
	// SupersededDate): the canary can never be promoted.
	Superseded     string `json:"superseded,omitempty"`
	SupersededBy   string `json:"superseded_by,omitempty"`
	SupersededDate string `json:"superseded_date,omitempty"`
}

// Production reads what production names now: the canary activity run
// at each step.
func (a *Activities) Production(ctx context.Context, s StepInput) (ProductionCheck, error) {
	reg, err := a.Models.Registry()
	if err != nil {
		return ProductionCheck{}, err
	}
	return a.production(ctx, reg, s)
}

func (a *Activities) production(ctx context.Context, reg *regmodels.Registry, s StepInput) (ProductionCheck, error) {
	p := s.Plan
	cur, err := reg.Resolve(ctx, p.Model+"@"+p.ProductionAlias)
	if err != nil {
		return ProductionCheck{}, models.RegistryError(err)
	}
	c := ProductionCheck{Now: cur.Version, Moved: cur.Version != p.Production}
	if !c.Moved {
		return c, nil
	}
	// The same rule the promotion would meet, without its compare-and-swap.
	req := p.promotion(models.Actor(s.In), "")
	req.IfFrom = false
	err = reg.CheckMove(ctx, req)
	if sup, ok := errors.AsType[*regmodels.Superseded](err); ok {
		c.SupersededBy, c.SupersededDate = sup.By.Version, sup.By.LogicalDate()
		c.Superseded = fmt.Sprintf("%s moved from %s to %s, trained for %s, while the canary baked: %s, trained for %s, is of an earlier logical time and is not promoted",
			p.ProductionAlias, p.Production, sup.By.Version, sup.By.LogicalDate(), p.Version, p.LogicalDate)
		a.log(s.In).Info("canary superseded", "production", cur.Version, "production_date", sup.By.LogicalDate(), "version", p.Version)
		return c, nil
	}
	if err != nil && !errors.Is(err, regmodels.ErrNotFound) {
		return ProductionCheck{}, models.RegistryError(err)
	}
	return c, nil
}

// checkProduction runs the production check at the start of step i (the
// first step follows the start's own check). It returns a decision when
// production moved since the canary started: superseded when it names a
// newer date, refused otherwise (the promotion's compare-and-swap would
// refuse it at the end anyway).
func (r *run) checkProduction(ctx workflow.Context, i int) (string, string) {
	if i == 0 || workflow.GetVersion(ctx, productionCheckChange, workflow.DefaultVersion, 1) < 1 {
		return "", ""
	}
	var c ProductionCheck
	if err := workflow.ExecuteActivity(ctx, ProductionActivity, StepInput{In: r.in, Plan: r.plan}).Get(ctx, &c); err != nil {
		// The check is advisory: the promotion's compare-and-swap is the guard.
		workflow.GetLogger(ctx).Warn("canary production check failed", "error", err)
		return "", ""
	}
	switch {
	case c.Superseded != "":
		r.out.SupersededBy, r.out.SupersededDate = c.SupersededBy, c.SupersededDate
		return Superseded, c.Superseded
	case c.Moved:
		return Refused, fmt.Sprintf("%s moved from %s to %s while the canary baked, so it is not promoted",
			r.plan.ProductionAlias, r.plan.Production, c.Now)
	}
	return "", ""
}

// notStarted ends a canary the start found superseded: the candidate is
// registered, nothing moved, no traffic was sent; the node succeeds, as
// a superseded deploy does.
func (r *run) notStarted(ctx workflow.Context, started time.Time) (nodetype.Result, error) {
	p := r.plan
	r.candidateOutputs()
	r.out.Decision, r.out.DecidedBy = Superseded, "registry"
	r.out.Reason = "not started, no traffic sent: " + p.Superseded
	r.out.SupersededBy, r.out.SupersededDate = p.SupersededBy, p.SupersededDate
	r.out.Summary = r.summary()
	r.state.Phase, r.state.Decision = "done", Superseded
	workflow.SetCurrentDetails(ctx, "**Canary superseded**: "+r.out.Reason)
	workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"decision": Superseded}).Counter(MetricDecisions).Inc(1)
	workflow.GetLogger(ctx).Info("canary not started: superseded", "by", p.SupersededBy, "date", p.SupersededDate)
	outputs, err := nodetype.Outputs(r.out)
	if err != nil {
		return nodetype.Result{}, err
	}
	return nodetype.Result{Outputs: outputs, Attempt: workflow.GetInfo(ctx).Attempt, StartedAt: started, EndedAt: workflow.Now(ctx)}, nil
}

// supersededSummary is the node's one line for a superseded canary.
func (r *run) supersededSummary() string {
	p := r.plan
	what := "canary rolled back"
	if len(r.out.Steps) == 0 {
		what = "no traffic sent"
	}
	return fmt.Sprintf("%s %s left at %s: superseded by %s for %s (%s registered, for %s; %s)", p.Model, p.ProductionAlias,
		r.out.SupersededBy, r.out.SupersededBy, r.out.SupersededDate, p.Version, cmpOr(p.LogicalDate, "no date"), what)
}

// candidateOutputs fills the outputs deploy has too: what the version is.
func (r *run) candidateOutputs() {
	r.out.Checksum, r.out.URI, r.out.LogicalDate = r.plan.Checksum, r.plan.URI, r.plan.LogicalDate
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
