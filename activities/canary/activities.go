package canary

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"time"

	"go.temporal.io/sdk/activity"

	approvalnode "github.com/retrain-ml/retrain/activities/approval"
	"github.com/retrain-ml/retrain/activities/models"
	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/approval"
	"github.com/retrain-ml/retrain/internal/canary"
	regmodels "github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/nodetype"
)

// Activities are the canary's steps that do I/O: the registry, the
// webhooks and Prometheus.
type Activities struct {
	Models *models.Models // the registry, webhooks and secrets, as deploy's
	Logger *slog.Logger
	// HTTP queries Prometheus; nil: a client with a 10 s timeout.
	HTTP *http.Client
}

// verifier verifies decisions against the approvers list in the secrets
// folder the worker's nodes read.
func (a *Activities) verifier() *approvalnode.Activities {
	v := &approvalnode.Activities{}
	if a != nil && a.Models != nil {
		v.Approvers = approval.Approvers{SecretsDir: a.Models.Env.SecretsDir}
	}
	return v
}

// Plan is what the start activity settled: the spec, parsed, and the
// versions the canary is between.
type Plan struct {
	Spec            canary.Spec `json:"spec"`
	Model           string      `json:"model"`
	Version         string      `json:"version"`
	Alias           string      `json:"alias"`
	ProductionAlias string      `json:"production_alias"`
	// Production is what the production alias named when the canary
	// started: the promotion is a compare-and-swap from it.
	Production string `json:"production"`
	// CanaryPrevious is what the canary alias named before.
	CanaryPrevious string `json:"canary_previous"`
	Webhooks       int    `json:"webhooks"`
	// Force is the node's force: the promotion may move production to
	// an older logical date.
	Force bool `json:"force,omitempty"`
	// The candidate version's checksum, files and logical date.
	Checksum    string `json:"checksum,omitempty"`
	URI         string `json:"uri,omitempty"`
	LogicalDate string `json:"logical_date,omitempty"`
	// SupersededBy is set when the canary did not start: production names
	// a version (of SupersededDate) trained for a later logical date than
	// the candidate. Nothing moved and no traffic was sent.
	SupersededBy   string `json:"superseded_by,omitempty"`
	SupersededDate string `json:"superseded_date,omitempty"`
	Superseded     string `json:"superseded,omitempty"` // why, in a sentence
}

// Split is one traffic split the serving system is told about.
type Split struct {
	Percent float64 `json:"percent"`
	// Event says why: step, promoted, rolled_back.
	Event string `json:"event"`
}

// StepInput is the input of the traffic, evaluate and decide activities:
// the node's input (its with block, secrets) and the plan.
type StepInput struct {
	In    nodetype.Input `json:"in"`
	Plan  Plan           `json:"plan"`
	Split Split          `json:"split"`
	// Promote: the decide activity promotes (else it rolls back).
	Promote bool   `json:"promote"`
	Reason  string `json:"reason"`
	// From is when the canary's first step started: the series activity
	// reads each check's series from then on.
	From time.Time `json:"from,omitzero"`
}

// RangeSeries is one check's series as Prometheus has it, canary and
// production, over the whole canary: what the report draws.
type RangeSeries struct {
	Canary     []canary.Point `json:"canary"`
	Production []canary.Point `json:"production,omitempty"`
	Error      string         `json:"error,omitempty"`
}

// maxRangePoints bounds the points of a range query: its step is the
// canary's length over it, at least a second.
const maxRangePoints = 200

// Series reads each check's series from the canary's start until now
// (/api/v1/query_range), for the report. Best effort: a check whose
// series cannot be read says why and has none.
func (a *Activities) Series(ctx context.Context, s StepInput) ([]RangeSeries, error) {
	ctx, stop := nodetype.StartKeepAlive(ctx)
	defer stop()
	header, secrets, err := a.prometheusHeader(ctx, s.In)
	if err != nil {
		return nil, err
	}
	p := canary.Prometheus{URL: s.Plan.Spec.PrometheusURL, HTTP: a.HTTP, Header: header, Logger: a.log(s.In)}
	end := time.Now()
	from := s.From
	if from.IsZero() || !from.Before(end) {
		from = end.Add(-time.Minute)
	}
	step := max(time.Second, end.Sub(from)/maxRangePoints).Round(time.Second)
	out := make([]RangeSeries, len(s.Plan.Spec.Checks))
	for i, c := range s.Plan.Spec.Checks {
		var err error
		out[i].Canary, err = p.QueryRange(ctx, canary.QueryFor(c.Query, s.Plan.Version, s.Plan.Alias), from, end, step)
		if err == nil && c.Relative() {
			out[i].Production, err = p.QueryRange(ctx, canary.QueryFor(c.Query, s.Plan.Production, s.Plan.ProductionAlias), from, end, step)
		}
		if err != nil {
			out[i] = RangeSeries{Error: progenv.MaskString(err.Error(), secrets)}
		}
	}
	return out, nil
}

// WebhookCalls is what the traffic and decide activities report of their
// webhooks.
type WebhookCalls struct {
	Results []models.WebhookResult `json:"results"`
}

// Decided is the decide activity's result.
type Decided struct {
	WebhookCalls
	// Refused is set when production had moved since the canary started:
	// nothing was promoted, the canary was rolled back.
	Refused string `json:"refused,omitempty"`
	// CanaryLeft is set when the canary alias had moved meanwhile too and
	// was left alone.
	CanaryLeft string `json:"canary_left,omitempty"`
	Seq        int64  `json:"seq"`
	// Forced: the promotion moved production to an older date by force.
	Forced bool `json:"forced,omitempty"`
	// ProductionCheck says, when the promotion was refused, whether
	// production now names a version of a later date (Superseded).
	ProductionCheck
}

func (a *Activities) log(in nodetype.Input) *slog.Logger {
	l := a.Logger
	if l == nil {
		l = slog.Default()
	}
	return l.With("pipeline", in.Pipeline, "run", in.RunID, "node", in.Node)
}

func decode(in nodetype.Input) (With, canary.Spec, error) {
	w, err := nodetype.DecodeWith[With](in.With)
	if err != nil {
		return With{}, canary.Spec{}, nodetype.Permanent(errtype.BadInput, "node %s (type canary): %v", in.Node, err)
	}
	if err := checkCanary(in.With); err != nil {
		return With{}, canary.Spec{}, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	spec, err := canary.ParseSpec(in.With["steps"], in.With["checks"], canary.Settings{
		Interval: w.Interval, PrometheusURL: w.PrometheusURL, PrometheusHosts: w.PrometheusHosts, Warmup: w.Warmup, FailureLimit: w.FailureLimit, InconclusiveTimeout: w.InconclusiveTimeout,
	})
	if err != nil {
		return With{}, canary.Spec{}, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	if w.WebhookAttempts < 1 {
		return With{}, canary.Spec{}, nodetype.Permanent(errtype.BadInput, "webhook_attempts must be at least 1, got %d", w.WebhookAttempts)
	}
	for _, f := range []struct{ name, v string }{{"model", w.Model}, {"alias", w.Alias}, {"production_alias", w.ProductionAlias}} {
		if err := regmodels.ValidateName(f.name, f.v); err != nil {
			return With{}, canary.Spec{}, nodetype.Permanent(errtype.BadInput, "%v", err)
		}
	}
	if o := in.Options; o != nil && o.Timeout > 0 {
		// The node's timeout is the canary workflow's run timeout: one
		// that ran out mid-bake would leave the canary serving its share.
		var total time.Duration
		for _, s := range spec.Steps {
			total += s.Bake
		}
		if reserve := DecisionReserve(o.Timeout); total+reserve+startReserve > o.Timeout {
			return With{}, canary.Spec{}, nodetype.Permanent(errtype.BadInput,
				"the steps bake for %s in all, which with %s to start and %s to decide does not fit the node's timeout %s: give the canary node a longer timeout",
				total, startReserve, reserve, o.Timeout)
		}
	}
	if w.Alias == w.ProductionAlias {
		return With{}, canary.Spec{}, nodetype.Permanent(errtype.BadInput, "alias %q is the production alias: the canary needs an alias of its own", w.Alias)
	}
	return w, spec, nil
}

// Start validates the node's input, registers or finds the candidate,
// reads production and moves the canary alias to the candidate. A retry
// after a crash finds its own earlier move and moves nothing again.
func (a *Activities) Start(ctx context.Context, in nodetype.Input) (Plan, error) {
	ctx = nodetype.WithSecretRefs(ctx, in.Secrets)
	w, spec, err := decode(in)
	if err != nil {
		return Plan{}, err
	}
	if a.Models == nil {
		return Plan{}, nodetype.Permanent(errtype.NoObjectStore, "the canary needs the model registry: this worker has no object store")
	}
	// Registered exactly as deploy registers (data snapshots, labels,
	// logical time), before anything else: a superseded canary keeps its
	// version, as a superseded deploy does.
	v, err := a.Models.Candidate(ctx, in, w.CandidateWith)
	if err != nil {
		return Plan{}, err
	}
	reg, err := a.Models.Registry()
	if err != nil {
		return Plan{}, err
	}
	prod, err := reg.Resolve(ctx, w.Model+"@"+w.ProductionAlias)
	if errors.Is(err, regmodels.ErrNotFound) {
		return Plan{}, nodetype.Permanent(errtype.BadInput, "%s has no %s version: a canary splits traffic with production; deploy the first version with a deploy node", w.Model, w.ProductionAlias)
	}
	if err != nil {
		return Plan{}, models.RegistryError(err)
	}
	if prod.Version == v.Version {
		return Plan{}, nodetype.Permanent(errtype.BadInput, "%s is already %s's %s version: nothing to canary", v.Ref(), w.Model, w.ProductionAlias)
	}
	plan := Plan{
		Spec: spec, Model: w.Model, Version: v.Version, Alias: w.Alias, ProductionAlias: w.ProductionAlias,
		Production: prod.Version, Webhooks: len(w.Webhooks), Force: w.Force,
		Checksum: v.Checksum, URI: reg.URI(v).String(), LogicalDate: v.LogicalDate(),
	}
	// The promotion this canary may end in must be one the registry's
	// rule allows: a candidate of an older date than production's does
	// not start, and sends no traffic.
	err = reg.CheckMove(ctx, plan.promotion(models.Actor(in), ""))
	if sup, ok := errors.AsType[*regmodels.Superseded](err); ok {
		plan.SupersededBy, plan.SupersededDate, plan.Superseded = sup.By.Version, sup.By.LogicalDate(), sup.Error()
		a.log(in).Info("canary not started: superseded", "model", w.Model, "version", v.Version, "logical_date", v.LogicalDate(),
			"production", prod.Version, "production_date", sup.By.LogicalDate())
		return plan, nil
	}
	if err != nil {
		return Plan{}, models.RegistryError(err)
	}
	reason := w.Reason
	if reason == "" {
		reason = fmt.Sprintf("canary by node %s of pipeline %s", in.Node, in.Pipeline)
	}
	by := models.Actor(in)
	mv, err := reg.Move(ctx, regmodels.MoveRequest{Model: w.Model, Alias: w.Alias, To: v.Version, Canary: true, By: by, Reason: reason})
	if err != nil {
		return Plan{}, models.RegistryError(err)
	}
	a.Models.NotifyMove(ctx, in, mv, nil) // the model's webhooks hear the canary alias move
	previous := mv.From
	if !mv.Changed && mv.Actor != by {
		previous = v.Version // it named the candidate already, before this canary
	}
	a.log(in).Info("canary started", "model", w.Model, "version", v.Version, "production", prod.Version, "alias", w.Alias, "previous", previous)
	plan.CanaryPrevious = previous
	return plan, nil
}

// splitEvent is the JSON body a traffic split is POSTed as.
type splitEvent struct {
	Model         string    `json:"model"`
	Production    string    `json:"production"`
	Canary        string    `json:"canary"`
	CanaryPercent float64   `json:"canary_percent"`
	Event         string    `json:"event"`
	Pipeline      string    `json:"pipeline"`
	Run           string    `json:"run_id"`
	Time          time.Time `json:"time"`
}

// Traffic tells the webhooks a split. A failed webhook is reported, not
// retried further: the canary goes on, as a deploy does. It heartbeats
// while the webhooks answer slowly or are retried, and stops trying
// before its own timeout, so that it reports rather than times out.
func (a *Activities) Traffic(ctx context.Context, s StepInput) (WebhookCalls, error) {
	ctx, stop := keepAlive(ctx)
	defer stop()
	ctx, cancel := beforeDeadline(ctx)
	defer cancel()
	return WebhookCalls{Results: a.notify(ctx, s, s.Plan.Production, s.Plan.Version)}, nil
}

// keepAlive heartbeats while an activity runs (nodetype.StartKeepAlive);
// called outside one, it does nothing.
func keepAlive(ctx context.Context) (context.Context, func()) {
	if !activity.IsActivity(ctx) {
		return ctx, func() {}
	}
	return nodetype.StartKeepAlive(ctx)
}

// beforeDeadline ends ctx a little before the activity's own deadline
// (its start-to-close timeout), so that webhooks cut short are reported
// by a completed activity instead of lost with a timed-out one.
func beforeDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	margin := min(2*time.Second, time.Until(dl)/4)
	return context.WithDeadline(ctx, dl.Add(-margin))
}

func (a *Activities) notify(ctx context.Context, s StepInput, production, canaryVersion string) []models.WebhookResult {
	ctx = nodetype.WithSecretRefs(ctx, s.In.Secrets)
	w, err := nodetype.DecodeWith[With](s.In.With)
	if err != nil || len(w.Webhooks) == 0 || a.Models == nil {
		return nil
	}
	ev := splitEvent{
		Model: s.Plan.Model, Production: production, Canary: canaryVersion, CanaryPercent: s.Split.Percent,
		Event: s.Split.Event, Pipeline: s.In.Pipeline, Run: s.In.RunID, Time: time.Now().UTC(),
	}
	return a.Models.PostJSON(ctx, "webhooks", w.Webhooks, max(w.WebhookAttempts, 1), ev, a.log(s.In))
}

// Evaluate runs every check's queries now and returns their samples, in
// the spec's order. A query Prometheus refuses fails as BadInput (the
// spec is wrong; the canary rolls back); an unreachable server is
// retried under the node's policy.
func (a *Activities) Evaluate(ctx context.Context, s StepInput) ([]canary.Sample, error) {
	ctx, stop := nodetype.StartKeepAlive(ctx)
	defer stop()
	header, secrets, err := a.prometheusHeader(ctx, s.In)
	if err != nil {
		return nil, err
	}
	p := canary.Prometheus{URL: s.Plan.Spec.PrometheusURL, HTTP: a.HTTP, Header: header, Logger: a.log(s.In)}
	now := time.Now()
	out := make([]canary.Sample, len(s.Plan.Spec.Checks))
	for i, c := range s.Plan.Spec.Checks {
		smp := canary.Sample{Time: now.UTC()}
		var err error
		if smp.Canary, err = a.query(ctx, p, canary.QueryFor(c.Query, s.Plan.Version, s.Plan.Alias), now); err != nil {
			return nil, checkError(c, err, secrets)
		}
		if c.Relative() {
			if smp.Production, err = a.query(ctx, p, canary.QueryFor(c.Query, s.Plan.Production, s.Plan.ProductionAlias), now); err != nil {
				return nil, checkError(c, err, secrets)
			}
		}
		if c.CountQuery != "" {
			if smp.Count, err = a.query(ctx, p, canary.QueryFor(c.CountQuery, s.Plan.Version, s.Plan.Alias), now); err != nil {
				return nil, checkError(c, err, secrets)
			}
		}
		out[i] = smp
	}
	return out, nil
}

// query returns a finite value or nil: JSON has no NaN, and a ratio of
// zero rates (0/0) is no data.
func (a *Activities) query(ctx context.Context, p canary.Prometheus, q string, at time.Time) (*float64, error) {
	v, err := p.Query(ctx, q, at)
	if err != nil || v == nil || math.IsNaN(*v) || math.IsInf(*v, 0) {
		return nil, err
	}
	return v, nil
}

// checkError names the check whose query failed, with the credentials'
// secrets masked (a proxy may echo a header back).
func checkError(c canary.Check, err error, secrets []string) error {
	msg := progenv.MaskString(fmt.Sprintf("check %s: %v", c.Name, err), secrets)
	if _, ok := errors.AsType[*canary.QueryError](err); ok {
		return nodetype.Permanent(errtype.BadInput, "%s", msg)
	}
	return errors.New(msg)
}

// Decide promotes (production to the candidate, by compare-and-swap from
// the version it named when the canary started) or rolls back (the
// canary alias back to production's version), then tells the webhooks.
// A promotion that finds production moved rolls back instead and says
// so in Refused.
func (a *Activities) Decide(ctx context.Context, s StepInput) (Decided, error) {
	ctx, stop := keepAlive(ctx)
	defer stop()
	ctx, cancel := beforeDeadline(ctx)
	defer cancel()
	reg, err := a.Models.Registry()
	if err != nil {
		return Decided{}, err
	}
	log, by, p := a.log(s.In), models.Actor(s.In), s.Plan
	var d Decided
	if s.Promote {
		mv, err := reg.Move(ctx, p.promotion(by, s.Reason))
		switch {
		case errors.Is(err, regmodels.ErrConcurrentMove), errors.Is(err, regmodels.ErrSuperseded):
			d.Refused = err.Error()
			log.Warn("canary not promoted: production moved meanwhile", "error", err)
			if d.ProductionCheck, err = a.production(ctx, reg, s); err != nil {
				return Decided{}, err
			}
		case err != nil:
			return Decided{}, models.RegistryError(err)
		default:
			d.Seq, d.Forced = mv.Seq, mv.Changed && mv.Forced
			log.Info("canary promoted", "version", p.Version, "from", p.Production, "seq", mv.Seq)
			d.Results = a.Models.NotifyMove(ctx, s.In, mv, a.notify(ctx, s, p.Version, p.Version))
			return d, nil
		}
	}
	// The canary alias goes back to production's version, as it is now
	// (another deploy may have moved it): canary and production naming one
	// version is no split (an alias cannot be unset).
	reason := s.Reason
	if d.Refused != "" {
		reason = "rolled back: " + d.Refused
	}
	if d.Superseded != "" {
		reason = "rolled back: " + d.Superseded
	}
	prod := p.Production
	if cur, err := reg.Resolve(ctx, p.Model+"@"+p.ProductionAlias); err == nil {
		prod = cur.Version
	} else if !errors.Is(err, regmodels.ErrNotFound) {
		return Decided{}, models.RegistryError(err)
	}
	// The canary alias names whatever is under test and goes back to
	// production's version, whatever its date (Canary: not ordered); only
	// while it still names this canary's candidate.
	mv, err := reg.Move(ctx, regmodels.MoveRequest{Model: p.Model, Alias: p.Alias, Kind: regmodels.KindRollback, To: prod,
		IfFrom: true, From: p.Version, Canary: true, By: by, Reason: reason})
	switch {
	case errors.Is(err, regmodels.ErrConcurrentMove):
		d.CanaryLeft = err.Error()
		log.Warn("canary alias moved meanwhile; left alone", "error", err)
	case err != nil:
		return Decided{}, models.RegistryError(err)
	default:
		d.Seq = mv.Seq
		log.Info("canary rolled back", "alias", p.Alias, "to", prod, "seq", mv.Seq)
	}
	s.Split = Split{Percent: 0, Event: RolledBack}
	d.Results = a.notify(ctx, s, prod, prod)
	if err == nil {
		d.Results = a.Models.NotifyMove(ctx, s.In, mv, d.Results)
	}
	if activity.IsActivity(ctx) {
		activity.RecordHeartbeat(ctx)
	}
	return d, nil
}
