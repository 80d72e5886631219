// Package canary is the `canary` node type: a deploy that proves itself on
// live traffic. It moves a canary alias to the candidate, walks traffic
// steps (the serving system is told each split by webhook), and during
// each step's bake, a durable timer, evaluates checks on live metrics from
// Prometheus; then it promotes the candidate to production by
// compare-and-swap, or rolls the canary back and fails the node. A human
// can approve (promote now) or reject (roll back now) at any time.
//
// It is a node type of its own, not a deploy strategy, because it runs as
// a child workflow (timers, signals, a query) while deploy is one
// activity: a node type's kind is fixed, and turning every deploy into a
// workflow would change the history of every existing run's deploy.
package canary

import (
	"errors"
	"fmt"
	"time"

	"github.com/retrain-ml/retrain/activities/models"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/internal/canary"
	"github.com/retrain-ml/retrain/nodetype"
)

// Names recorded in run histories; they do not change.
const (
	Name             = "canary"
	Workflow         = "Canary"
	StartActivity    = "CanaryStart"
	TrafficActivity  = "CanaryTraffic"
	EvaluateActivity = "CanaryEvaluate"
	DecideActivity   = "CanaryDecide"
	SeriesActivity   = "CanarySeries"
	// ProductionActivity checks at each step that production still names
	// what the canary started against.
	ProductionActivity = "CanaryProduction"
	// VerifyActivity verifies a human's decision against the worker's
	// approvers list (activities/approval).
	VerifyActivity = "CanaryVerifyApproval"

	// ApproveName and RejectName are the update and signal a human's
	// decision goes by (the update answers; the signal is for tools that
	// can only signal); StateQuery returns the State.
	ApproveName = "canary-approve"
	RejectName  = "canary-reject"
	StateQuery  = "canary"

	// MetricDecisions counts decisions by decision (promoted,
	// rolled_back, approved, rejected).
	MetricDecisions = "retrain_canary_decisions_total"
)

// Decisions a canary ends with.
const (
	Promoted   = "promoted"    // every check passed at the last step
	RolledBack = "rolled_back" // a check was breached
	Approved   = "approved"    // a human promoted it before the bake ended
	Rejected   = "rejected"    // a human rolled it back
	Refused    = "refused"     // production moved meanwhile: not promoted, rolled back
	// Superseded: production names a version trained for a later logical
	// date than the candidate: at the start (no traffic was sent), or
	// since a newer version was deployed while the canary baked (rolled
	// back). The candidate is registered; the node succeeds, as a
	// superseded deploy does.
	Superseded = "superseded"
)

// With is a canary node's `with` block.
type With struct {
	// The candidate, registered exactly as deploy registers it.
	models.CandidateWith
	Alias                 string            `json:"alias" default:"canary" doc:"the alias that names the version serving the canary's share"`
	ProductionAlias       string            `json:"production_alias" default:"production" doc:"the alias promoted when the canary passes"`
	Steps                 any               `json:"steps" required:"true" type:"any" nested:"*.percent:number,*.bake:string,*.warmup:string" doc:"traffic steps [{percent, bake, warmup}], percents increasing, the last 100; each bake is a durable timer during which the checks run; a step's warmup overrides the node's"`
	Checks                any               `json:"checks" required:"true" type:"any" nested:"*.name:string,*.query:query,*.direction:string,*.min:number,*.max:number,*.min_absolute_change:number,*.min_relative_change:number,*.count_query:query,*.min_count:number,*.min_samples:number,*.on_no_data:string,*.failure_limit:number" doc:"checks on live metrics [{name, query, one of min/max/min_absolute_change/min_relative_change, direction, count_query, min_count, min_samples, on_no_data, failure_limit}]; the query's $${version} and $${alias} select a version's series; a change threshold compares with the same query for production (the gate's rules); no data in a step's warmup or first min_samples evaluations is inconclusive"`
	Interval              string            `json:"interval" type:"duration" default:"30s" doc:"how often the checks run during a bake"`
	Warmup                string            `json:"warmup" type:"duration" doc:"each step's warmup unless it sets its own: evaluations in a step's first warmup that find no data are inconclusive, not breaches; at most the step's bake"`
	FailureLimit          int               `json:"failure_limit" default:"2" doc:"consecutive breached evaluations of a check (no data past the warmup counts) that roll the canary back; a check's own failure_limit overrides it; 1 rolls back at the first"`
	InconclusiveTimeout   string            `json:"inconclusive_timeout" type:"duration" default:"1h" doc:"how long an inconclusive step (a check without min_samples passing evaluations when its bake ended) waits for retrain approve or reject; then the canary rolls back. Capped by the node's timeout"`
	PrometheusURL         string            `json:"prometheus_url" required:"true" doc:"http(s) URL of the Prometheus server the checks query (its path + /api/v1/query; no query or fragment); written out, or with a ${...} in its host only, then scheme://HOST[:PORT] with HOST one of prometheus_hosts"`
	PrometheusHosts       []string          `json:"prometheus_hosts" literal:"true" doc:"the hosts (host, or host:port) a prometheus_url with a ${...} may name; written in the spec"`
	PrometheusBearerToken string            `json:"prometheus_bearer_token" doc:"bearer token sent to Prometheus (Authorization: Bearer ...): a ${secret.NAME}, resolved on the worker and masked"`
	PrometheusBasicAuth   map[string]string `json:"prometheus_basic_auth" doc:"{username, password} sent to Prometheus as basic auth; the password a ${secret.NAME}"`
	PrometheusHeaders     map[string]string `json:"prometheus_headers" doc:"extra headers sent to Prometheus (a tenant, a proxy's key); a header that authenticates (Authorization, Cookie, or a name with auth, token, key, secret or password) must hold a ${secret.NAME}"`
	Webhooks              []string          `json:"webhooks" doc:"URLs to POST each traffic split to ({model, production, canary, canary_percent}); they may hold ${secret.NAME} (not in the host)"`
	WebhookAttempts       int               `json:"webhook_attempts" default:"3" doc:"attempts per webhook"`
	Reason                string            `json:"reason" doc:"why, recorded in the alias history"`
	Force                 bool              `json:"force" literal:"true" doc:"canary and promote even a candidate trained for an older logical date than production's (by default such a canary registers its version, sends no traffic and ends superseded, as deploy does); written literally (true), never from a ${...}; the promotion is recorded as forced"`
}

// Outputs are a canary node's outputs (also on the error of a canary that
// rolled back, where the run's result shows them).
type Outputs struct {
	Decision        string `json:"decision"`   // promoted, rolled_back, approved, rejected, refused, superseded
	DecidedBy       string `json:"decided_by"` // "checks", or who approved or rejected: a verified name, or "claimed by NAME"
	Reason          string `json:"reason"`
	Model           string `json:"model"`
	Version         string `json:"version"`
	Ref             string `json:"ref"`
	Alias           string `json:"alias"`
	ProductionAlias string `json:"production_alias"`
	PreviousVersion string `json:"previous_version"` // production before the canary: what a compensation moves back to
	Moved           bool   `json:"moved"`            // production moved to version
	// Forced: the promotion moved production to a version of an older
	// logical date by force (recorded so in the alias history).
	Forced bool `json:"forced"`
	// Seq is the production alias's history entry of the promotion.
	Seq      int64  `json:"seq"`
	Checksum string `json:"checksum"`
	URI      string `json:"uri"` // where the artifact files are
	// LogicalDate is the date of the data the version was trained for.
	LogicalDate string `json:"logical_date"`
	// SupersededBy and SupersededDate name the version of a later logical
	// date production names, when the canary ended superseded.
	SupersededBy   string        `json:"superseded_by"`
	SupersededDate string        `json:"superseded_date"`
	Steps          []StepRecord  `json:"steps"`
	Series         []Series      `json:"series"`
	Breach         *BreachRecord `json:"breach"`
	Webhooks       int           `json:"webhooks"` // calls made (one per split per webhook)
	WebhooksFailed int           `json:"webhooks_failed"`
	Summary        string        `json:"summary"`
	// RefusedApprovals says the latest approvals or rejections the worker
	// refused (unsigned, badly signed, an unknown name), newest last.
	RefusedApprovals []string `json:"refused_approvals"`
}

// StepRecord is one traffic step as it went.
type StepRecord struct {
	Percent float64       `json:"percent"`
	Bake    string        `json:"bake"`
	Started time.Time     `json:"started"`
	Ended   time.Time     `json:"ended"`
	Outcome string        `json:"outcome"` // passed, breached, approved, rejected, inconclusive, out_of_time; promotion (the last step, unbaked); not_baked
	Checks  []CheckRecord `json:"checks"`  // each check's verdict when the step ended
	Warmup  string        `json:"warmup,omitempty"`
}

// CheckRecord is a check's values and verdict at decision time.
type CheckRecord struct {
	Name       string   `json:"name"`
	Status     string   `json:"status"`
	Reason     string   `json:"reason"`
	Canary     *float64 `json:"canary"`
	Production *float64 `json:"production"`
	Count      *float64 `json:"count"`
	Samples    int      `json:"samples"` // evaluations counted in the step
	Passed     int      `json:"passed"`
	Breaches   int      `json:"breaches"`
	// Inconclusive evaluations: no data in the warmup or the first
	// min_samples, too few events, or no data under on_no_data: ignore.
	Inconclusive int `json:"inconclusive"`
	Streak       int `json:"streak"` // consecutive breached evaluations when the step ended
	FailureLimit int `json:"failure_limit,omitempty"`
}

// Series is one check's samples over the whole canary, for the report.
type Series struct {
	Check           string          `json:"check"`
	Query           string          `json:"query"`            // the canary's
	ProductionQuery string          `json:"production_query"` // "" for an absolute threshold
	Threshold       string          `json:"threshold"`
	Max             *float64        `json:"max,omitempty"`
	Min             *float64        `json:"min,omitempty"`
	Relative        *float64        `json:"relative,omitempty"` // min_relative_change
	Absolute        *float64        `json:"absolute,omitempty"` // min_absolute_change
	Direction       string          `json:"direction,omitempty"`
	Points          []canary.Sample `json:"points"`
	Steps           []int           `json:"steps"` // the step (0-based) of each point
	// Outcomes are how each point was counted: pass, breach or waiting
	// (inconclusive).
	Outcomes []string `json:"outcomes,omitempty"`
	// Range is the check's series as Prometheus has it over the whole
	// canary (query_range), between and before the evaluations.
	Range RangeSeries `json:"range"`
}

// BreachRecord names the check that rolled the canary back.
type BreachRecord struct {
	Check           string   `json:"check"`
	Step            int      `json:"step"` // 1-based
	Percent         float64  `json:"percent"`
	Reason          string   `json:"reason"`
	Canary          *float64 `json:"canary"`
	Production      *float64 `json:"production"`
	Query           string   `json:"query"`
	ProductionQuery string   `json:"production_query,omitempty"`
	// Evaluations are the times of the consecutive breached evaluations
	// that reached FailureLimit: what the rollback counted.
	Evaluations  []time.Time `json:"evaluations,omitempty"`
	FailureLimit int         `json:"failure_limit,omitempty"`
}

// checkCanary refuses, before any run, a block no run could use; values
// holding ${...} are checked when the node runs. Each error names its
// field, so validation reports it at that field's line.
func checkCanary(with map[string]any) error {
	_, dir := with["dir"]
	_, version := with["version"]
	if !dir && !version {
		return errors.New("give dir (a candidate to register) or version (a registered version), or both")
	}
	if err := models.CheckNames(with, "model", "version", "alias", "production_alias"); err != nil {
		return err
	}
	var errs []error
	// Steps and checks are parsed as the run has them: spec text with no
	// reference left, its escapes ($${version}) read.
	if v, ok := with["steps"]; ok && !dags.HasRef(v) {
		v, _ = dags.Interpolate(v, dags.Scope{})
		_, err := canary.ParseSteps(v, 0)
		errs = append(errs, dags.AtField("steps", err))
		if w, ok := with["warmup"].(string); ok && err == nil && !dags.HasRef(w) {
			if d, derr := dags.ParseDuration(w); derr == nil {
				_, err := canary.ParseSteps(v, d)
				errs = append(errs, dags.AtField("warmup", err))
			}
		}
	}
	if v, ok := with["checks"]; ok && !dags.HasRef(v) {
		v, _ = dags.Interpolate(v, dags.Scope{})
		checks, err := canary.ParseChecks(v, 0)
		if err == nil {
			err = canary.CheckQueries(checks)
		}
		for _, e := range joined(err) {
			errs = append(errs, dags.AtField("checks", e))
		}
	}
	if v, ok := with["failure_limit"]; ok && !dags.HasRef(v) {
		_, err := canary.ParseFailureLimit(v)
		errs = append(errs, dags.AtField("failure_limit", err))
	}
	if s, ok := with["inconclusive_timeout"].(string); ok && !dags.HasRef(s) {
		if d, err := dags.ParseDuration(s); err == nil && d <= 0 {
			errs = append(errs, dags.AtField("inconclusive_timeout", errors.New("inconclusive_timeout: want a duration above 0")))
		}
	}
	hosts := stringList(with["prometheus_hosts"])
	errs = append(errs, dags.AtField("prometheus_hosts", canary.CheckPrometheusHosts(hosts)))
	if s, ok := with["prometheus_url"].(string); ok && !dags.HasRef(s) {
		errs = append(errs, dags.AtField("prometheus_url", canary.CheckPrometheusURL(s)))
		errs = append(errs, dags.AtField("prometheus_url", canary.CheckPrometheusHost(s, hosts)))
	} else if ok {
		errs = append(errs, dags.AtField("prometheus_url", canary.CheckPrometheusTemplate(s, hosts)))
	}
	errs = append(errs, checkAuth(with)...)
	if a, ok := with["alias"].(string); ok {
		if p, ok := with["production_alias"].(string); ok && a == p || !ok && a == "production" {
			errs = append(errs, dags.AtField("alias", fmt.Errorf("alias %q is the production alias: the canary needs an alias of its own", a)))
		}
	}
	if n, ok := with["webhook_attempts"].(float64); ok && n < 1 {
		errs = append(errs, dags.AtField("webhook_attempts", fmt.Errorf("webhook_attempts must be at least 1, got %v", n)))
	}
	if hooks, ok := with["webhooks"].([]any); ok {
		for _, h := range hooks {
			if s, ok := h.(string); ok {
				errs = append(errs, dags.AtField("webhooks", models.CheckWebhook(s)))
			}
		}
	}
	return errors.Join(errs...)
}

// joined is err's errors one by one (errors.Join's), so that each is
// placed at its own check.
func joined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

// stringList reads a list of strings from a `with` value; nil when it is
// not one (the field checks say so).
func stringList(v any) []string {
	list, _ := v.([]any)
	var out []string
	for _, x := range list {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// Type returns the canary node type, its activities run by a.
func Type(a *Activities) nodetype.Type {
	return nodetype.NewWorkflow[With, Outputs](dags.NodeType{
		Name:       Name,
		Provenance: true,
		Doc: "Deploy a candidate on live traffic: move a canary alias to it (compare-and-swap), tell the serving system each " +
			"traffic step by webhook ({model, production, canary, canary_percent}), and during each step's bake (a durable timer) " +
			"evaluate checks every interval against Prometheus: a PromQL query per check, its $${version} the canary's or production's, " +
			"with one threshold (max/min, or min_relative_change/min_absolute_change against production: the gate's rules). " +
			"failure_limit (default 2) consecutive breached evaluations roll back; no data is a breach unless on_no_data: ignore, " +
			"except in a step's warmup and first min_samples evaluations, where it is inconclusive; a step without min_samples passing " +
			"evaluations pauses for retrain approve/reject and rolls back after inconclusive_timeout. The canary keeps a deadline inside " +
			"the node's timeout and rolls back (0% to serving) when cancelled, out of time or when its run is terminated. " +
			"Every check passing at the last step promotes the candidate to production (compare-and-swap: refused if production moved " +
			"meanwhile); a breach moves the canary alias back, says 0% and fails the node (error type CanaryRolledBack), so the run's " +
			"on_failure compensations run. `retrain approve RUN` promotes now, `retrain reject RUN --reason ...` rolls back now. " +
			"Production never moves back in date: a candidate trained for an older logical date than production's is registered and " +
			"sends no traffic, and a canary whose production is replaced by a newer version while it bakes rolls back at the next step; " +
			"both end superseded (the node succeeds, as a superseded deploy does) unless force: true.",
		Check: checkCanary,
		// A terminated run cancels its canary, which rolls back.
		CancelOnClose: true,
	}, Workflow, Canary, map[string]any{
		StartActivity:      a.Start,
		TrafficActivity:    a.Traffic,
		EvaluateActivity:   a.Evaluate,
		DecideActivity:     a.Decide,
		SeriesActivity:     a.Series,
		ProductionActivity: a.Production,
		VerifyActivity:     a.verifier().Verify,
	})
}

// NodeType is the canary node type's declaration, for code that names it.
var NodeType = Type(&Activities{}).NodeType
