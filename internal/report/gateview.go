package report

import (
	"fmt"
	"html/template"
	"strings"

	"github.com/retrain-ml/retrain/activities/evaluate"

	"github.com/retrain-ml/retrain/internal/approval"
	"github.com/retrain-ml/retrain/internal/gate"
	"github.com/retrain-ml/retrain/runs"
)

// gateView is a gate's section: its verdict, then its Lift: the table of
// checks with candidate - baseline, the per-slice lift and both models'
// ROC curves and reliability diagrams.
type gateView struct {
	Node, Title, Verdict, Reason, Forced string
	Baseline                             string // which version, of which date, and where its figures came from
	BaseName                             string // the baseline's column header: "control", "baseline v3"
	Sources                              string // which evaluations the figures came from, and on which rows
	Comparisons                          []comparisonRow
	SliceColumn                          string
	SliceMetrics                         []string
	Slices                               []sliceLiftRow
	SlicesNote                           string
	ROC, Calibration                     template.HTML
}

type comparisonRow struct {
	Metric, Candidate, Baseline, Lift, Relative, Threshold, Result, Reason string
	LiftClass                                                              string // better / worse, in the metric's direction
	Gated                                                                  bool
}

type sliceLiftRow struct {
	Slice, Rows, Missing string
	Cells                []liftCell // one per SliceMetrics
}

type liftCell struct{ Candidate, Baseline, Lift, Class string }

// gateBaseline says what a gate compared with: "Baseline: v3, trained for
// 2026-11-14; figures from ...", or "" without one.
func gateBaseline(out map[string]any) string {
	version, _ := out["baseline_version"].(string)
	if has, _ := out["has_baseline"].(bool); !has || version == "" {
		return ""
	}
	s := "Baseline: " + version
	if version == "control" {
		// feature-experiment's gate: the baseline is the same pipeline's
		// model without the new features, so the differences are the lift.
		s = "Baseline: the control (the same training without the new features); the candidate - baseline figures are the lift"
	}
	if d, _ := out["baseline_logical_date"].(string); d != "" {
		s += ", trained for " + d
	}
	switch src, _ := out["baseline_source"].(string); {
	case src == "evaluation":
		s += "; both models scored on this run's rows"
	case strings.HasPrefix(src, "registry "):
		s += "; figures recorded with " + strings.TrimPrefix(src, "registry ") + " at its own evaluation, not this run's rows"
	case src == "given":
		s += "; figures given to the gate by the pipeline"
	}
	return s + "."
}

// gateRows is a gate's section; skipped names the nodes that did not run
// because of its verdict (their `when` reads it and was false).
func gateRows(n runs.NodeState, l *Lift, skipped []string) gateView {
	g := gateView{Node: n.ID, Title: "Gate " + n.ID}
	if n.ID == "gate" {
		g.Title = "Gate"
	}
	switch {
	case n.Status == runs.NodeSucceeded && n.Outputs["passed"] == true:
		g.Verdict = "passed"
	case n.Status == runs.NodeSucceeded && len(skipped) > 0:
		// Name what was held back: a deploy, a promotion, a canary.
		g.Verdict = "rejected (skipped: " + strings.Join(skipped, ", ") + ")"
	case n.Status == runs.NodeSucceeded:
		g.Verdict = "rejected"
	case n.Status == runs.NodeFailed:
		g.Verdict = "rejected (run failed)"
	default:
		g.Verdict = string(n.Status)
	}
	g.Reason, _ = n.Outputs["reason"].(string)
	if n.Error != "" {
		g.Reason = n.Error
	}
	if n.Outputs["forced"] == true {
		by, _ := n.Outputs["forced_by"].(string)
		g.Forced = fmt.Sprintf("%s: %v", approval.Phrase("forced", by), n.Outputs["force_reason"])
	}
	if refused, ok := n.Outputs["refused_approvals"].([]any); ok && len(refused) > 0 {
		var s []string
		for _, r := range refused {
			s = append(s, fmt.Sprint(r))
		}
		g.Reason += " Approvals the worker refused: " + strings.Join(s, "; ") + "."
	}
	g.Baseline = gateBaseline(n.Outputs)
	if l == nil {
		return g
	}
	g.BaseName, g.SlicesNote, g.SliceColumn, g.SliceMetrics = l.BaselineName, l.SlicesNote, l.SliceColumn, l.SliceMetrics
	g.Sources = liftSources(l)
	for _, m := range l.Metrics {
		row := comparisonRow{Metric: m.Metric, Candidate: figPtr(m.Candidate), Baseline: figPtr(m.Baseline), Lift: signedPtr(m.Lift),
			Relative: "–", Threshold: thresholdText(m), Reason: m.Reason, Gated: m.Check != "",
			LiftClass: liftClass(m.Lift, direction(m.Metric, m.Direction))}
		if m.Relative != nil {
			row.Relative = signedFig(100**m.Relative, 2) + "%"
		}
		switch {
		case m.Check == "":
			row.Result = "not gated"
		case m.Skipped:
			row.Result = "skipped"
		case !m.Passed:
			row.Result = "FAIL"
		default:
			row.Result = "pass"
		}
		g.Comparisons = append(g.Comparisons, row)
	}
	for _, s := range l.Slices {
		row := sliceLiftRow{Slice: s.Slice, Rows: rowsText(s.CandidateRows, s.BaselineRows)}
		if s.Missing != "" {
			row.Missing = "not in the " + s.Missing + "'s evaluation"
		}
		for _, name := range l.SliceMetrics {
			d := s.Metrics[name]
			row.Cells = append(row.Cells, liftCell{Candidate: figPtr(d.Candidate), Baseline: figPtr(d.Baseline), Lift: signedPtr(d.Lift),
				Class: liftClass(d.Lift, direction(name, gateDirection(l, name)))})
		}
		g.Slices = append(g.Slices, row)
	}
	// Both curves on one plot, only when both models' figures are at hand:
	// otherwise the candidate's evaluate section draws its own.
	if l.Candidate != nil && l.Baseline != nil {
		series := []plotSeries{liftSeries(l.Candidate, "candidate", candidateColor, false), liftSeries(l.Baseline, l.BaselineName, baselineColor, true)}
		if len(series[0].ROC) > 0 || len(series[1].ROC) > 0 {
			g.ROC = rocSVG(series)
		}
		if len(series[0].Bins) > 0 || len(series[1].Bins) > 0 {
			g.Calibration = calibrationSVG(series)
		}
	}
	return g
}

func liftSeries(s *LiftSide, name, color string, dashed bool) plotSeries {
	m := s.Metrics()
	auc, ok := m.Overall[evaluate.MetricAUC]
	return plotSeries{Name: name, Color: color, Dashed: dashed, ROC: m.ROC, Bins: m.CalibrationBins, AUC: fig(auc, ok)}
}

// liftSources says where a lift's figures came from: "candidate:
// evaluate_candidate, control: evaluate_control, both scored on the same
// 15000 eval rows of 2026-11-03 .. 2026-11-04 (2 days)".
func liftSources(l *Lift) string {
	if l.Candidate == nil || l.Baseline == nil {
		return ""
	}
	side := func(s *LiftSide) string {
		if s.Baseline {
			return s.Node + " (its baseline)"
		}
		return s.Node
	}
	c, b := l.Candidate.Report, l.Baseline.Report
	s := "Figures of the candidate from " + side(l.Candidate) + ", of the " + l.BaselineName + " from " + side(l.Baseline)
	if c.Data == b.Data && c.Dataset == b.Dataset && c.Rows == b.Rows {
		return s + ", both scored on the same " + evalScope(c) + "."
	}
	return s + ": scored on different rows (" + evalScope(c) + " vs " + evalScope(b) + ")."
}

// knownDirections are which way the evaluate node's metrics get better,
// for colouring the lift of a metric the gate did not check.
var knownDirections = map[string]gate.Direction{
	evaluate.MetricAUC: gate.HigherIsBetter, evaluate.MetricAccuracy: gate.HigherIsBetter, evaluate.MetricLogLoss: gate.LowerIsBetter,
}

func direction(metric string, d gate.Direction) gate.Direction {
	if d != "" {
		return d
	}
	return knownDirections[metric]
}

// gateDirection is the direction the gate's checks give metric, or "".
func gateDirection(l *Lift, metric string) gate.Direction {
	for _, m := range l.Metrics {
		if m.Metric == metric && m.Direction != "" {
			return m.Direction
		}
	}
	return ""
}

func liftClass(lift *float64, d gate.Direction) string {
	if lift == nil || signedFig(*lift, 4) == "0.0000" {
		return "" // no colour for what the table shows as no change
	}
	switch better := *lift > 0; {
	case d == gate.HigherIsBetter && better, d == gate.LowerIsBetter && !better:
		return "better"
	case d != "":
		return "worse"
	}
	return ""
}

// thresholdText writes a check as a bound on the figures of the table:
// a change check as the least lift (or, for a metric that should fall,
// the most), in its units.
func thresholdText(m MetricLift) string {
	t := m.Threshold
	bound := "≥ "
	if m.Direction == gate.LowerIsBetter {
		bound, t = "≤ ", -t
	}
	switch m.Check {
	case gate.CheckValueMin:
		return "≥ " + fig(gate.Number(m.Threshold), true)
	case gate.CheckValueMax:
		return "≤ " + fig(gate.Number(m.Threshold), true)
	case gate.CheckMinAbsoluteChange:
		return "lift " + bound + signed(t, "%+.4f")
	case gate.CheckMinRelativeChange:
		return "relative lift " + bound + signed(100*t, "%+.2f%%")
	case "":
		return "–"
	}
	return string(m.Check) + " " + fig(gate.Number(m.Threshold), true)
}

// signed formats f with format, 0 as "0" (no "+0.0000" or "-0.0000").
func signed(f float64, format string) string {
	if f == 0 {
		return "0"
	}
	return fmt.Sprintf(format, f)
}

func signedPtr(f *float64) string {
	if f == nil {
		return "–"
	}
	return signedFig(*f, 4)
}

// signedFig writes f with its sign and digits decimals, but a figure
// that rounds to zero as plain zero: "-0.0000" would read as a fall.
func signedFig(f float64, digits int) string {
	s := fmt.Sprintf("%+.*f", digits, f)
	if strings.Trim(s[1:], "0.") == "" {
		return s[1:]
	}
	return s
}

func figPtr(f *float64) string {
	if f == nil {
		return "–"
	}
	return fig(gate.Number(*f), true)
}

// rowsText is a slice's row count, both when the two evaluations differ.
func rowsText(c, b *float64) string {
	switch {
	case c != nil && b != nil && *c != *b:
		return fmt.Sprintf("%.0f / %.0f", *c, *b)
	case c != nil:
		return fmt.Sprintf("%.0f", *c)
	case b != nil:
		return fmt.Sprintf("%.0f", *b)
	}
	return "–"
}
