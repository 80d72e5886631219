package report

import (
	"encoding/json"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/retrain-ml/retrain/activities/evaluate"
	gatenode "github.com/retrain-ml/retrain/activities/gate"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/internal/gate"
	"github.com/retrain-ml/retrain/runs"
)

// Lift is a gate's verdict laid out as the lift of its candidate over its
// baseline: each gated metric's figures, candidate - baseline and its
// relative change against the threshold, then the same per slice. The
// per-slice figures and the ROC curves are not in the gate's outputs: they
// come from the evaluate nodes of the run that scored the two models (a
// feature experiment's candidate and control, or one evaluate node that
// scored a candidate and production), found through the gate's `with`.
type Lift struct {
	Gate        string
	HasBaseline bool
	// BaselineName names the baseline in the table: "control" (a name the
	// pipeline gave), "baseline v3" (a registry version), "baseline".
	BaselineName string
	// Candidate and Baseline are the evaluations the figures came from;
	// nil when they did not come from an evaluate node of this run (a
	// registry record, a map the pipeline built).
	Candidate, Baseline *LiftSide
	Metrics             []MetricLift
	SliceColumn         string
	SliceMetrics        []string // the metrics of each slice's row
	Slices              []SliceLift
	// SlicesNote says why there is no per-slice table, or what is missing
	// from it.
	SlicesNote string
}

// LiftSide is one model's figures in an evaluate node's metrics file.
type LiftSide struct {
	Node     string // the evaluate node
	Baseline bool   // its baseline's figures, not its candidate's
	Report   *evaluate.EvaluationReport
}

// Metrics are the side's figures.
func (s *LiftSide) Metrics() *evaluate.ModelMetrics {
	if s.Baseline {
		return s.Report.Baseline
	}
	return &s.Report.Candidate
}

// Diff is one metric of both models: nil where a side lacks it; Lift is
// candidate - baseline, nil unless both are finite.
type Diff struct {
	Candidate, Baseline, Lift *float64
}

// MetricLift is one check of the gate (or, with Check "", a metric both
// evaluations have that the gate did not check).
type MetricLift struct {
	Metric    string
	Check     gate.Check
	Direction gate.Direction
	Diff
	Relative  *float64 // Lift / |Baseline|; nil when undefined
	Threshold float64
	Passed    bool
	Skipped   bool
	Reason    string
}

// SliceLift is one slice of both evaluations. Missing names the side that
// has no figures for it ("candidate" or the baseline's name): an
// evaluation keeps only its largest slices, so the two lists can differ.
type SliceLift struct {
	Slice                       string
	CandidateRows, BaselineRows *float64
	Metrics                     map[string]Diff
	Missing                     string
}

// ungated are the overall metrics listed after the gated ones, so the
// table holds all that the evaluate nodes' own sections would.
var ungated = []string{evaluate.MetricAUC, evaluate.MetricLogLoss, evaluate.MetricAccuracy, evaluate.MetricCalibration, "mean_prediction", "mean_label"}

// collectLifts lays out each gate of the run as a Lift.
func collectLifts(r *Report, plan *dags.Plan) map[string]*Lift {
	out := map[string]*Lift{}
	for _, n := range r.Result.Nodes {
		if n.Type != gatenode.GateType.Name {
			continue
		}
		// Comparisons come back from history as generic JSON.
		var cs []gate.Comparison
		if b, err := json.Marshal(n.Outputs["comparisons"]); err == nil {
			_ = json.Unmarshal(b, &cs)
		}
		if len(cs) == 0 {
			continue // a gate that failed without outputs, or has not run
		}
		var with map[string]any
		if plan != nil {
			if i := slices.IndexFunc(plan.Nodes, func(p dags.PlanNode) bool { return p.ID == n.ID }); i >= 0 {
				with = plan.Nodes[i].With
			}
		}
		out[n.ID] = gateLift(n, with, cs, r.Evaluations)
	}
	return out
}

// gateLift is the Lift of gate node n whose `with` (nil without the plan)
// and comparisons are given, from the run's evaluations.
func gateLift(n runs.NodeState, with map[string]any, cs []gate.Comparison, evals map[string]*evaluate.EvaluationReport) *Lift {
	version, _ := n.Outputs["baseline_version"].(string)
	source, _ := n.Outputs["baseline_source"].(string)
	has, _ := n.Outputs["has_baseline"].(bool)
	l := &Lift{Gate: n.ID, HasBaseline: has, BaselineName: "baseline"}
	switch {
	case version != "" && source == "given":
		l.BaselineName = version // a name the pipeline chose, e.g. "control"
	case version != "":
		l.BaselineName = "baseline " + version
	}
	candOpts, baseOpts := refSides(with, evals)
	l.Candidate = pickSide(candOpts, cs, func(c gate.Comparison) *gate.Number { return c.Candidate })
	if has && !strings.HasPrefix(source, "registry ") {
		l.Baseline = pickSide(baseOpts, cs, func(c gate.Comparison) *gate.Number { return c.Baseline })
	}
	var cand, base *evaluate.ModelMetrics
	if l.Candidate != nil {
		cand = l.Candidate.Metrics()
	}
	if l.Baseline != nil {
		base = l.Baseline.Metrics()
	}
	gated := map[string]bool{}
	for _, c := range cs {
		gated[c.Metric] = true
		m := MetricLift{Metric: c.Metric, Check: c.Check, Direction: c.Direction, Threshold: float64(c.Threshold),
			Passed: c.Passed, Skipped: c.Skipped, Reason: c.Reason,
			Diff: diff(numPtr(c.Candidate), numPtr(c.Baseline))}
		if m.Lift != nil && *m.Baseline != 0 {
			m.Relative = ptr(*m.Lift / math.Abs(*m.Baseline))
		}
		l.Metrics = append(l.Metrics, m)
	}
	if cand != nil && base != nil {
		for _, name := range ungated {
			if gated[name] {
				continue
			}
			m := MetricLift{Metric: name, Diff: diff(overall(cand, name), overall(base, name))}
			if m.Candidate == nil && m.Baseline == nil {
				continue
			}
			if m.Lift != nil && *m.Baseline != 0 {
				m.Relative = ptr(*m.Lift / math.Abs(*m.Baseline))
			}
			l.Metrics = append(l.Metrics, m)
		}
	}
	l.slices(source, cs, cand, base)
	return l
}

// slices fills the per-slice lift, or says why there is none.
func (l *Lift) slices(source string, cs []gate.Comparison, cand, base *evaluate.ModelMetrics) {
	switch {
	case !l.HasBaseline:
		l.SlicesNote = "No baseline: there is no lift to show per slice."
		return
	case strings.HasPrefix(source, "registry "):
		l.SlicesNote = "Per-slice lift is not available: the baseline's figures are those the registry recorded with " +
			strings.TrimPrefix(source, "registry ") + " at its own evaluation, which keeps no slices. " +
			"Score both models on this run's rows (an evaluate node with model and baseline, slices: true) to see them."
		return
	case l.Candidate == nil || l.Baseline == nil:
		l.SlicesNote = "Per-slice lift is not available: the gate's figures do not come from evaluate nodes of this run" +
			" (or the run's plan, which names them, could not be read)."
		return
	}
	for _, s := range []*LiftSide{l.Candidate, l.Baseline} {
		if s.Report.SliceColumn == "" || len(s.Metrics().Slices) == 0 {
			l.SlicesNote = "Per-slice lift is not available: " + s.Node + " scored without slices (give it slices: true)."
			return
		}
	}
	if c, b := l.Candidate.Report.SliceColumn, l.Baseline.Report.SliceColumn; c != b {
		l.SlicesNote = "Per-slice lift is not available: the candidate is sliced by " + c + ", the baseline by " + b + "."
		return
	}
	l.SliceColumn = l.Candidate.Report.SliceColumn
	// The gated metrics that slices have; AUC and log loss for a gate
	// that checks none of them.
	for _, c := range cs {
		if !slices.Contains(l.SliceMetrics, c.Metric) && inSlices(cand, c.Metric) {
			l.SliceMetrics = append(l.SliceMetrics, c.Metric)
		}
	}
	if len(l.SliceMetrics) == 0 {
		l.SliceMetrics = []string{evaluate.MetricAUC, evaluate.MetricLogLoss}
	}
	keys := map[string]bool{}
	for k := range cand.Slices {
		keys[k] = true
	}
	for k := range base.Slices {
		keys[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		cm, cok := cand.Slices[k]
		bm, bok := base.Slices[k]
		s := SliceLift{Slice: k, Metrics: map[string]Diff{}}
		switch {
		case !cok:
			s.Missing = "candidate"
		case !bok:
			s.Missing = l.BaselineName
		}
		s.CandidateRows, s.BaselineRows = slicePtr(cm, evaluate.MetricCount), slicePtr(bm, evaluate.MetricCount)
		for _, m := range l.SliceMetrics {
			s.Metrics[m] = diff(slicePtr(cm, m), slicePtr(bm, m))
		}
		l.Slices = append(l.Slices, s)
	}
	if slices.ContainsFunc(l.Slices, func(s SliceLift) bool { return s.Missing != "" }) {
		l.SlicesNote = "Some slices are in one evaluation only (each keeps its largest max_slices slices): they have no lift."
	}
}

// refSides are the evaluations the gate's `with` names: those its
// evaluation, candidate and baseline fields refer to. Without a plan, or
// where the fields name no evaluate node, every evaluation of the run may
// be either side (pickSide then tells them apart by their figures).
func refSides(with map[string]any, evals map[string]*evaluate.EvaluationReport) (cand, base []LiftSide) {
	add := func(into *[]LiftSide, field string, baseline func(key string) bool) {
		refs, _ := dags.Refs(with[field])
		for _, r := range refs {
			if e := evals[r.Name]; r.Kind == "nodes" && e != nil {
				s := LiftSide{Node: r.Name, Baseline: baseline(r.Key), Report: e}
				if !slices.ContainsFunc(*into, func(o LiftSide) bool { return o.Node == s.Node && o.Baseline == s.Baseline }) {
					*into = append(*into, s)
				}
			}
		}
	}
	// ${nodes.E.outputs.evaluation} holds both of E's models; any other
	// key of E is its candidate's figures except "baseline".
	add(&cand, "evaluation", func(string) bool { return false })
	add(&base, "evaluation", func(string) bool { return true })
	add(&cand, "candidate", func(k string) bool { return k == "baseline" })
	add(&base, "baseline", func(k string) bool { return k == "baseline" })
	all := func() []LiftSide {
		var out []LiftSide
		for _, id := range slices.Sorted(maps.Keys(evals)) {
			out = append(out, LiftSide{Node: id, Report: evals[id]}, LiftSide{Node: id, Baseline: true, Report: evals[id]})
		}
		return out
	}
	if len(cand) == 0 {
		cand = all()
	}
	if len(base) == 0 {
		base = all()
	}
	return cand, base
}

// pickSide returns the one option whose overall figures are those the
// gate compared (fig of each comparison), or nil when none or several
// are: the figures guard against drawing a model the gate did not judge.
func pickSide(opts []LiftSide, cs []gate.Comparison, fig func(gate.Comparison) *gate.Number) *LiftSide {
	var found []LiftSide
	for _, o := range opts {
		m := o.Metrics()
		if m == nil {
			continue
		}
		ok, checked := true, 0
		for _, c := range cs {
			want := fig(c)
			if want == nil {
				continue
			}
			got, has := m.Overall[c.Metric]
			checked++
			if !has || !same(float64(got), float64(*want)) {
				ok = false
			}
		}
		if ok && checked > 0 {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		return nil
	}
	return &found[0]
}

func same(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b))
}

func diff(c, b *float64) Diff {
	d := Diff{Candidate: c, Baseline: b}
	if c != nil && b != nil && finite(*c) && finite(*b) {
		d.Lift = ptr(*c - *b)
	}
	return d
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

func ptr(f float64) *float64 { return &f }

func numPtr(n *gate.Number) *float64 {
	if n == nil {
		return nil
	}
	return ptr(float64(*n))
}

func overall(m *evaluate.ModelMetrics, name string) *float64 {
	if v, ok := m.Overall[name]; ok {
		return ptr(float64(v))
	}
	return nil
}

func slicePtr(m map[string]gate.Number, name string) *float64 {
	if v, ok := m[name]; ok {
		return ptr(float64(v))
	}
	return nil
}

func inSlices(m *evaluate.ModelMetrics, name string) bool {
	for _, s := range m.Slices {
		if _, ok := s[name]; ok {
			return true
		}
	}
	return false
}

// key identifies a side among the evaluations.
func (s LiftSide) key() string {
	if s.Baseline {
		return s.Node + "/baseline"
	}
	return s.Node
}

// liftShown are the sides (by key) that a lift with both sides draws.
func liftShown(lifts map[string]*Lift) map[string]bool {
	out := map[string]bool{}
	for _, l := range lifts {
		if l.Candidate != nil && l.Baseline != nil {
			out[l.Candidate.key()], out[l.Baseline.key()] = true, true
		}
	}
	return out
}
