package gate

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	approvalnode "github.com/retrain-ml/retrain/activities/approval"
	"github.com/retrain-ml/retrain/activities/evaluate"
	"github.com/retrain-ml/retrain/nodetype"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/internal/approval"
	"github.com/retrain-ml/retrain/internal/gate"
	"github.com/retrain-ml/retrain/internal/number"
	"github.com/retrain-ml/retrain/internal/s3store"
)

// GateWorkflow is the workflow a gate node runs as: a child workflow, so
// that it can wait for a human's approval (workflow id <run>/<node>).
const GateWorkflow = "Gate"

// What a gate does with a candidate that did not pass (after waiting for
// an approval, if configured).
const (
	// RejectSkip: the node succeeds with passed = false; a deploy with
	// `when: ${nodes.gate.outputs.passed}` is skipped, the run succeeds.
	RejectSkip = "skip"
	// RejectFail: the node fails, so the run fails and its on_failure
	// compensations undo what it changed (the promoted table, say).
	RejectFail = "fail"
)

// gateConfigKeys are the `with` keys that configure the thresholds; the
// others say what to gate and how to treat a rejection.
var gateConfigKeys = []string{"metrics", "no_baseline", "zero_baseline"}

// Name is the gate node type's name.
const Name = "gate"

// GateType is the `gate` node type's declaration (its name, fields and
// outputs), for code that names the type.
var GateType = Types(nil)[0].NodeType

// With is a gate node's `with` block. The metric maps and the evaluation
// are read by package gate's rules (numbers, numeric text or null), so
// they stay untyped here.
type With struct {
	Metrics         any    `json:"metrics" required:"true" type:"any" nested:"*.direction:string,*.min:number,*.max:number,*.min_absolute_change:number,*.min_relative_change:number" doc:"metric -> {direction, min, max, min_absolute_change, min_relative_change}; the changes are the least improvement over the baseline in the metric's direction (negative: that much worse is allowed)"`
	NoBaseline      string `json:"no_baseline" default:"value_only" doc:"without a production model: value_only, block or bless"`
	ZeroBaseline    string `json:"zero_baseline" default:"fail" doc:"a baseline of 0 under a min_relative_change check: fail or skip_relative"`
	Evaluation      any    `json:"evaluation" type:"any" doc:"an evaluate node's ${nodes.ID.outputs.evaluation}"`
	Candidate       any    `json:"candidate" type:"any" nested:"*:number" doc:"instead of evaluation: the candidate's metrics, a map of name to number, from any node (a map output ${nodes.ID.outputs.KEY}, or a map of references)"`
	Baseline        any    `json:"baseline" type:"any" doc:"with candidate: the baseline's metrics, a map like candidate's (absent or null: no baseline), or {model: NAME, alias: production}: the metrics the registry recorded with the version the alias names (its own evaluation, not this run's rows)"`
	BaselineVersion string `json:"baseline_version" doc:"with candidate: the baseline's version, for the record"`
	CandidateID     string `json:"candidate_id" doc:"with candidate: the candidate's id, for the record"`
	CandidateData   any    `json:"candidate_data" type:"any" doc:"with candidate: the rows it was scored on ({split, dataset, window, dates, rows}); the gate refuses to compare different rows"`
	BaselineData    any    `json:"baseline_data" type:"any" doc:"with candidate: the rows the baseline was scored on"`
	// The tag is a quoted string: the doc holds backquotes.
	WaitForApproval string "json:\"wait_for_approval\" type:\"duration\" doc:\"when the gate fails, wait this long for `retrain approve` (absent: do not wait)\""
	OnReject        string `json:"on_reject" default:"skip" doc:"skip (output passed=false) or fail (fail the node, and so the run)"`
}

// Outputs are a gate node's outputs: the verdict and every comparison.
type Outputs struct {
	Passed      bool              `json:"passed"`
	Reason      string            `json:"reason"`
	Forced      bool              `json:"forced"`
	ForcedBy    string            `json:"forced_by"` // a verified name, or "claimed by NAME"
	ForceReason string            `json:"force_reason"`
	Comparisons []gate.Comparison `json:"comparisons"`
	// Failed names each failed comparison with its figures.
	Failed []string `json:"failed"`
	// RefusedApprovals says the latest approvals the worker refused while
	// the gate waited (unsigned, badly signed, an unknown name).
	RefusedApprovals []string `json:"refused_approvals"`
	BaselineVersion  string   `json:"baseline_version"`
	// BaselineLogicalDate is the date of the data the baseline was
	// trained for, when the registry recorded one.
	BaselineLogicalDate string `json:"baseline_logical_date"`
	// BaselineSource says where the baseline's figures came from: an
	// evaluate node's scoring of both models on this run's rows
	// ("evaluation"), the registry's record of the version
	// ("registry ctr@v3"), or the node's baseline map ("given").
	BaselineSource string `json:"baseline_source"`
	CandidateID    string `json:"candidate_id"`
	HasBaseline    bool   `json:"has_baseline"`
	// Waited is set when the gate failed and waited for an approval.
	Waited  bool   `json:"waited"`
	Summary string `json:"summary"` // one line for the run's node table
}

// gateSummary says the verdict in a line: "passed 5 of 5 checks against
// v1", "failed 1 of 3 checks (no baseline)", "forced by alice: ...".
func gateSummary(r gate.Result) string {
	failed, skipped := len(r.Failed()), 0
	for _, c := range r.Comparisons {
		if c.Skipped {
			skipped++
		}
	}
	total := len(r.Comparisons)
	var s string
	switch {
	case r.Forced:
		s = fmt.Sprintf("%s (%d of %d checks failed)", approvalnode.Phrase("forced through", r.ForcedBy), failed, total)
	case r.Passed:
		s = fmt.Sprintf("passed %d of %d checks", total-failed-skipped, total)
	default:
		s = fmt.Sprintf("failed %d of %d checks", failed, total)
	}
	if skipped > 0 {
		s += fmt.Sprintf(", %d skipped", skipped)
	}
	if r.HasBaseline {
		return s + " against " + r.BaselineVersion
	}
	return s + " (no baseline)"
}

// checkGate checks what the schema cannot: which fields go together, the
// value of on_reject and the thresholds (by package gate's parser). It runs
// on the raw block, where a value holding ${...} is left to run time.
func checkGate(with map[string]any) error {
	_, ev := with["evaluation"]
	_, cand := with["candidate"]
	if ev == cand {
		return errors.New("give evaluation (an evaluate node's outputs.evaluation) or candidate (a map of metrics), not both")
	}
	if ev {
		for _, k := range []string{"baseline", "baseline_version", "candidate_id", "candidate_data", "baseline_data"} {
			if _, ok := with[k]; ok {
				return fmt.Errorf("%s goes with candidate; evaluation carries its own", k)
			}
		}
	}
	if ref, ok := registryRef(with["baseline"]); ok {
		if _, given := with["baseline_version"]; given {
			return errors.New("baseline_version goes with a baseline map; a registry baseline ({model, alias}) names its own version")
		}
		if _, given := with["baseline_data"]; given {
			return errors.New("baseline_data goes with a baseline map; a registry baseline's figures are from its own evaluation")
		}
		if !dags.HasRef(ref.Model) && !dags.HasRef(ref.Alias) {
			if err := checkRegistryRef(ref); err != nil {
				return err
			}
		}
	} else if m, ok := with["baseline"].(map[string]any); ok {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if m[k] != nil && !dags.HasRef(m[k]) {
				if _, err := number.Figure(m[k]); err != nil {
					return fmt.Errorf("baseline.%s: %w (a baseline is a map of metric figures, or {model: NAME, alias: ALIAS})", k, err)
				}
			}
		}
	}
	if r, ok := with["on_reject"].(string); ok && !dags.HasRef(r) && r != RejectSkip && r != RejectFail {
		return fmt.Errorf("on_reject %q: want skip or fail", r)
	}
	// A metric whose thresholds hold a reference is left to run time, but
	// a removed key (absolute, relative) is refused by its name alone.
	var errs []error
	if m, ok := with["metrics"].(map[string]any); ok {
		for _, name := range slices.Sorted(maps.Keys(m)) {
			if dags.HasRef(m[name]) {
				errs = append(errs, gate.RemovedKeys(name, m[name]))
			}
		}
	}
	if cfg, ok := literalGateConfig(with); ok {
		_, err := gate.ParseConfig(cfg)
		errs = append(errs, err)
	} // else thresholds given by reference are checked when the node runs
	return errors.Join(errs...)
}

// checkGateMetrics refuses, before any run, a threshold on a metric the
// candidate cannot have: the gate would find it missing and reject every
// candidate (a run that "succeeds" and never ships). The names are known
// from a candidate map written in the spec, or from the node an
// evaluation or candidate reference reads when its type declares its
// metrics (source); otherwise nothing is said.
func checkGateMetrics(with map[string]any, source func(any) ([]string, string, bool)) error {
	m, ok := with["metrics"].(map[string]any)
	if !ok || len(m) == 0 {
		return nil
	}
	var (
		names []string
		from  string
	)
	if ev, given := with["evaluation"]; given {
		if names, from, ok = source(ev); !ok {
			return nil
		}
		from += "'s evaluation"
	} else if c, isMap := with["candidate"].(map[string]any); isMap {
		names, from = slices.Sorted(maps.Keys(c)), "the candidate map"
	} else if c, given := with["candidate"]; given {
		if names, from, ok = source(c); !ok {
			return nil
		}
	} else {
		return nil
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(m)) {
		if slices.Contains(names, name) {
			continue
		}
		errs = append(errs, dags.AtField("metrics", fmt.Errorf("metrics.%s: %s has no metric %q%s, so the gate would reject every candidate; its metrics are %s",
			name, from, name, dags.DidYouMean(name, names), strings.Join(names, ", "))))
	}
	return errors.Join(errs...)
}

// literalGateConfig returns the threshold keys of with, leaving out what
// holds a ${...} reference (only known at run time). ok is false when no
// metric is left to check.
func literalGateConfig(with map[string]any) (map[string]any, bool) {
	cfg := map[string]any{}
	for _, k := range gateConfigKeys {
		v, ok := with[k]
		if !ok {
			continue
		}
		if k == "metrics" {
			m, isMap := v.(map[string]any)
			if !isMap {
				if dags.HasRef(v) {
					return nil, false
				}
				cfg[k] = v
				continue
			}
			lit := map[string]any{}
			for name, t := range m {
				if !dags.HasRef(t) {
					lit[name] = t
				}
			}
			if len(lit) == 0 && len(m) > 0 {
				return nil, false
			}
			cfg[k] = lit
			continue
		}
		if !dags.HasRef(v) {
			cfg[k] = v
		}
	}
	return cfg, true
}

// GateDecision is a gate's verdict before any human override, with what
// the workflow needs to act on it. It is computed from the node's resolved
// `with` by [DecideGate], a pure function.
type GateDecision struct {
	Result gate.Result `json:"result"`
	// BaselineLogicalDate is the baseline's, from an evaluation that
	// names it.
	BaselineLogicalDate string        `json:"baseline_logical_date,omitempty"`
	Wait                time.Duration `json:"wait"`
	OnReject            string        `json:"on_reject"`
	// Error is set when the input is bad: the node fails without retry.
	Error string `json:"error,omitempty"`
}

// DecideGate parses a gate node's resolved `with` and evaluates it.
func DecideGate(with map[string]any) GateDecision {
	d, err := decideGate(with)
	if err != nil {
		return GateDecision{Error: err.Error()}
	}
	return d
}

func decideGate(with map[string]any) (GateDecision, error) {
	// The raw block's rules first: they are the validator's, and some are
	// about which keys are present, which the decoded block cannot say.
	if err := checkGate(with); err != nil {
		return GateDecision{}, err
	}
	w, err := nodetype.DecodeWith[With](with)
	if err != nil {
		return GateDecision{}, err
	}
	if w.OnReject != RejectSkip && w.OnReject != RejectFail {
		return GateDecision{}, fmt.Errorf("on_reject %q: want skip or fail", w.OnReject)
	}
	d := GateDecision{OnReject: w.OnReject}
	if w.WaitForApproval != "" {
		wait, err := dags.ParseDuration(w.WaitForApproval)
		if err != nil {
			return d, fmt.Errorf("wait_for_approval: %w", err)
		}
		d.Wait = wait
	}
	cfgWith := map[string]any{"no_baseline": w.NoBaseline, "zero_baseline": w.ZeroBaseline}
	if w.Metrics != nil {
		cfgWith["metrics"] = w.Metrics
	}
	cfg, err := gate.ParseConfig(cfgWith)
	if err != nil {
		return d, err
	}
	_, fromEvaluation := with["evaluation"]
	cand, base, err := gateInputs(w, fromEvaluation)
	if err != nil {
		return d, err
	}
	if d.Result, err = gate.Evaluate(cfg, cand, base); err != nil {
		return d, err
	}
	if m, ok := w.Evaluation.(map[string]any); ok && fromEvaluation && base != nil {
		d.BaselineLogicalDate, _ = m["baseline_logical_date"].(string)
	}
	return d, nil
}

// gateInputs reads the candidate and baseline from evaluation (when the
// block has that key), or from candidate/baseline.
func gateInputs(w With, fromEvaluation bool) (gate.Candidate, *gate.Baseline, error) {
	var (
		candM, baseM             any
		candD, baseD             any
		baseVersion, candidateID string
	)
	if fromEvaluation {
		m, ok := w.Evaluation.(map[string]any)
		if !ok {
			return gate.Candidate{}, nil, fmt.Errorf("evaluation: want an evaluate node's outputs.evaluation, got %T", w.Evaluation)
		}
		candM, baseM = m["candidate"], m["baseline"]
		candD, baseD = m["candidate_data"], m["baseline_data"]
		baseVersion, _ = m["baseline_version"].(string)
		candidateID, _ = m["candidate_id"].(string)
	} else {
		candM, baseM = w.Candidate, w.Baseline
		candD, baseD = w.CandidateData, w.BaselineData
		baseVersion, candidateID = w.BaselineVersion, w.CandidateID
	}
	cs, err := evaluate.ParseScope("candidate_data", candD)
	if err != nil {
		return gate.Candidate{}, nil, err
	}
	bs, err := evaluate.ParseScope("baseline_data", baseD)
	if err != nil {
		return gate.Candidate{}, nil, err
	}
	if baseM != nil {
		if err := evaluate.SameScope(cs, bs); err != nil {
			return gate.Candidate{}, nil, err
		}
	}
	cm, err := metricValuesOf("candidate", candM)
	if err != nil {
		return gate.Candidate{}, nil, err
	}
	cand := gate.Candidate{ID: candidateID, Metrics: cm}
	if baseM == nil {
		return cand, nil, nil
	}
	bm, err := metricValuesOf("baseline", baseM)
	if err != nil {
		return gate.Candidate{}, nil, err
	}
	return cand, &gate.Baseline{Version: baseVersion, Metrics: bm}, nil
}

// metricValuesOf reads a map of metric figures by package number's rule
// for figures: a null figure (the evaluate node writes a NaN AUC as null)
// becomes NaN, which fails every check on it rather than passing silently;
// numeric strings are numbers, as templating yields text.
func metricValuesOf(what string, v any) (map[string]float64, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: want a map of metric name to number, got %T", what, v)
	}
	out := make(map[string]float64, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		f, err := number.Figure(m[k])
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", what, k, err)
		}
		out[k] = f
	}
	return out, nil
}

// GateOutputs are a gate node's outputs for a result.
func GateOutputs(r gate.Result, waited bool) Outputs {
	failed := []string{}
	for _, c := range r.Failed() {
		failed = append(failed, fmt.Sprintf("%s %s: %s", c.Metric, c.Check, c.Reason))
	}
	comparisons := r.Comparisons
	if comparisons == nil {
		comparisons = []gate.Comparison{}
	}
	return Outputs{
		Passed: r.Passed, Reason: r.Reason, Forced: r.Forced, ForcedBy: r.ForcedBy, ForceReason: r.ForceReason,
		Comparisons: comparisons, Failed: failed, BaselineVersion: r.BaselineVersion,
		CandidateID: r.CandidateID, HasBaseline: r.HasBaseline, Waited: waited, RefusedApprovals: []string{},
		Summary: gateSummary(r),
	}
}

// RejectionMessage says why a gate rejected a candidate; the gate's
// reason names each failed check with its figures.
func RejectionMessage(r gate.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "gate rejected candidate %s", r.CandidateID)
	if r.HasBaseline {
		fmt.Fprintf(&b, " against baseline %s", r.BaselineVersion)
	} else {
		b.WriteString(" (no baseline)")
	}
	fmt.Fprintf(&b, ": %s", r.Reason)
	return b.String()
}

// Types returns the gate node type: a child workflow, so that a rejected
// candidate can wait for `retrain approve` without holding a worker slot.
//
// store is the worker's object store, where a registry baseline is read
// (nil: none configured; such a gate then fails as bad input).
func Types(store *s3store.Store) []nodetype.Type {
	return TypesWith(store, approval.Approvers{})
}

// TypesWith is Types on a worker whose approvers list is approvers: a
// failed gate takes only the approvals it verifies (activities/approval).
func TypesWith(store *s3store.Store, approvers approval.Approvers) []nodetype.Type {
	b := &Baselines{Store: store}
	v := &approvalnode.Activities{Approvers: approvers}
	return []nodetype.Type{nodetype.NewWorkflow[With, Outputs](dags.NodeType{
		Name: Name,
		Doc: "Compare a candidate's metrics with thresholds and with the baseline's, from an evaluate node's evaluation or from any " +
			"node's metric maps (candidate, baseline). See package gate for the exact semantics: min/max bounds inclusive; " +
			"min_absolute_change and min_relative_change (MLflow's names and direction-aware meaning) are the least improvement in " +
			"the metric's direction, candidate - baseline for higher_is_better and baseline - candidate for lower_is_better, relative " +
			"divided by |baseline|, a negative figure allowing that much worse; the old keys absolute and relative are refused. " +
			"Outputs passed and every comparison with its figures. A failed gate can wait for a human " +
			"(wait_for_approval; `retrain approve RUN --force --reason ...`), then skips (on_reject: skip, the default) or fails the run (fail).",
		Check:        checkGate,
		CheckMetrics: checkGateMetrics,
	}, GateWorkflow, Gate, map[string]any{BaselineActivity: b.Read, VerifyActivity: v.Verify})}
}

// VerifyActivity verifies an approval against the worker's approvers list.
const VerifyActivity = "GateVerifyApproval"
