package report

import (
	"encoding/json"
	"fmt"
	"html"
	"html/template"
	"math"
	"strings"
	"time"

	canarynode "github.com/retrain-ml/retrain/activities/canary"
	"github.com/retrain-ml/retrain/internal/approval"
	"github.com/retrain-ml/retrain/internal/canary"
	"github.com/retrain-ml/retrain/runs"
)

// canaryView is a canary node's section: its decision, each traffic step
// and, per check, the canary's and production's series over the bake
// with the threshold.
type canaryView struct {
	Node, Title, Decision, Reason string
	Promoted                      bool
	Steps                         []canaryStepRow
	Plots                         []canaryPlot
}

type canaryStepRow struct {
	N                                     int
	Percent, Bake, Started, Took, Outcome string
	Checks                                []canaryCheckCell
	Breached                              bool
}

type canaryCheckCell struct{ Name, Status, Canary, Production, Samples, Reason string }

type canaryPlot struct {
	Check, Threshold, Query, ProductionQuery, Verdict string
	SVG                                               template.HTML
}

// canaryOutputs reads a canary node's outputs (on success, or from its
// error on a rollback); ok is false when it has none.
func canaryOutputs(n runs.NodeState) (canarynode.Outputs, bool) {
	var o canarynode.Outputs
	if n.Type != canarynode.Name || n.Outputs["decision"] == nil {
		return o, false
	}
	b, err := json.Marshal(n.Outputs)
	if err != nil || json.Unmarshal(b, &o) != nil {
		return o, false
	}
	return o, true
}

func canaryRows(n runs.NodeState) (canaryView, bool) {
	o, ok := canaryOutputs(n)
	if !ok {
		return canaryView{}, false
	}
	v := canaryView{Node: n.ID, Title: "Canary " + n.ID, Decision: strings.ReplaceAll(o.Decision, "_", " "), Reason: o.Reason,
		Promoted: o.Moved}
	if n.ID == "canary" {
		v.Title = "Canary"
	}
	if o.DecidedBy != "" && o.DecidedBy != "checks" {
		v.Decision = approval.Phrase(v.Decision, o.DecidedBy) // "approved, claimed by alice" when the worker could not verify the name
	}
	if len(o.RefusedApprovals) > 0 {
		v.Reason += " Decisions the worker refused: " + strings.Join(o.RefusedApprovals, "; ") + "."
	}
	var t0 time.Time
	if len(o.Steps) > 0 {
		t0 = o.Steps[0].Started
	}
	for i, s := range o.Steps {
		row := canaryStepRow{N: i + 1, Percent: fmt.Sprintf("%g%%", s.Percent), Bake: s.Bake, Outcome: strings.ReplaceAll(s.Outcome, "_", " "),
			Started: fmt.Sprintf("+%s", s.Started.Sub(t0).Round(time.Second)), Took: s.Ended.Sub(s.Started).Round(100 * time.Millisecond).String()}
		row.Breached = s.Outcome == "breached" || s.Outcome == canarynode.Rejected || s.Outcome == "out_of_time" || s.Outcome == "inconclusive"
		for _, c := range s.Checks {
			samples := fmt.Sprintf("%d/%d", c.Passed, c.Samples)
			if c.FailureLimit > 0 {
				// What the decision counted: breaches against the limit,
				// and evaluations that could not say (no data yet).
				samples += fmt.Sprintf(" (%d breached, failure_limit %d; %d inconclusive)", c.Breaches, c.FailureLimit, c.Inconclusive)
			}
			row.Checks = append(row.Checks, canaryCheckCell{Name: c.Name, Status: c.Status, Canary: fmtPtr(c.Canary), Production: fmtPtr(c.Production),
				Samples: samples, Reason: c.Reason})
		}
		v.Steps = append(v.Steps, row)
	}
	for _, s := range o.Series {
		p := canaryPlot{Check: s.Check, Threshold: s.Threshold, Query: s.Query, ProductionQuery: s.ProductionQuery, Verdict: "passed"}
		var breachAt int = -1
		if o.Breach != nil && o.Breach.Check == s.Check {
			p.Verdict = "breached at step " + fmt.Sprint(o.Breach.Step) + ": " + o.Breach.Reason
			breachAt = len(s.Points) - 1
		} else if len(s.Points) == 0 {
			p.Verdict = "not evaluated"
		}
		p.SVG = canarySVG(s, o.Steps, t0, breachAt)
		v.Plots = append(v.Plots, p)
	}
	return v, true
}

// canaryDeploy is a canary's banner: what it deployed, or why not.
func canaryDeploy(n runs.NodeState) (deployView, bool) {
	o, ok := canaryOutputs(n)
	if !ok {
		if n.Type == canarynode.Name && n.Status == runs.NodeFailed {
			return deployView{Text: "Not deployed", Detail: n.ID + " failed: " + n.Error}, true
		}
		return deployView{}, false
	}
	if o.Moved {
		d := deployView{Deployed: true, Text: "Deployed " + o.Model + " " + o.Version + " by canary",
			Detail:  fmt.Sprintf("%s: %s → %s after %d steps (%s)", o.ProductionAlias, o.PreviousVersion, o.Version, len(o.Steps), strings.ReplaceAll(o.Decision, "_", " ")),
			URI:     o.URI,
			Command: "retrain model show " + o.Ref}
		if o.Forced {
			d.Detail += "; forced to an older date"
		}
		return d, true
	}
	if o.Decision == canarynode.Superseded {
		return deployView{Text: "Not deployed: superseded", Detail: o.Summary, Command: "retrain model show " + o.Ref}, true
	}
	return deployView{Text: "Canary " + strings.ReplaceAll(o.Decision, "_", " "),
		Detail: fmt.Sprintf("%s stays at %s: %s", o.ProductionAlias, o.PreviousVersion, o.Reason)}, true
}

func fmtPtr(v *float64) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf("%.4g", *v)
}

// The canary plot's frame: wide, as a bake is a time series.
const (
	cpW, cpH          = 560, 240
	cpLeft, cpTop     = 64, 22
	cpRight, cpBottom = 16, 40
)

// canarySVG draws one check's samples: canary (solid) and production
// (dashed) over time since the first step started, the threshold each
// sample was judged against (red, dashed), the steps as vertical lines
// and the breaching sample circled.
func canarySVG(s canarynode.Series, steps []canarynode.StepRecord, t0 time.Time, breachAt int) template.HTML {
	type pt struct{ x, y float64 }
	var canaryPts, prodPts, canaryLine, prodLine, thrLine []pt
	lo, hi := math.Inf(1), math.Inf(-1)
	see := func(y float64) {
		lo, hi = math.Min(lo, y), math.Max(hi, y)
	}
	for _, p := range s.Points {
		x := p.Time.Sub(t0).Seconds()
		if p.Canary != nil {
			canaryPts = append(canaryPts, pt{x, *p.Canary})
			see(*p.Canary)
		}
		if p.Production != nil {
			prodPts = append(prodPts, pt{x, *p.Production})
			see(*p.Production)
		}
	}
	// The lines are the series as Prometheus has it over the whole
	// canary (query_range); without it, the evaluations joined up.
	for _, p := range s.Range.Canary {
		canaryLine = append(canaryLine, pt{p.Time.Sub(t0).Seconds(), p.Value})
		see(p.Value)
	}
	for _, p := range s.Range.Production {
		prodLine = append(prodLine, pt{p.Time.Sub(t0).Seconds(), p.Value})
		see(p.Value)
	}
	if len(canaryLine) == 0 {
		canaryLine = canaryPts
	}
	if len(prodLine) == 0 {
		prodLine = prodPts
	}
	constant, isConst := constThreshold(s)
	if isConst {
		see(constant)
	} else {
		for _, p := range prodLine {
			prod := p.y
			if y, ok := thresholdAt(s, canary.Sample{Production: &prod}); ok {
				thrLine = append(thrLine, pt{p.x, y})
				see(y)
			}
		}
	}
	end := 1.0
	if n := len(steps); n > 0 {
		end = math.Max(end, steps[n-1].Ended.Sub(t0).Seconds())
		if bake, err := time.ParseDuration(steps[n-1].Bake); err == nil {
			end = math.Max(end, steps[n-1].Started.Add(bake).Sub(t0).Seconds())
		}
	}
	for _, p := range s.Points {
		end = math.Max(end, p.Time.Sub(t0).Seconds())
	}
	if isConst {
		thrLine = []pt{{0, constant}, {end, constant}}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 0, 1
	}
	if hi-lo < 1e-9 {
		pad := math.Max(math.Abs(hi)*0.1, 1e-3)
		lo, hi = lo-pad, hi+pad
	} else {
		pad := (hi - lo) * 0.12
		lo, hi = lo-pad, hi+pad
	}
	pw, ph := float64(cpW-cpLeft-cpRight), float64(cpH-cpTop-cpBottom)
	at := func(x, y float64) (float64, float64) {
		return float64(cpLeft) + pw*x/end, float64(cpTop) + ph*(1-(y-lo)/(hi-lo))
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`, cpW, cpH+2*legendLineH+4)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="#fcfcfc" stroke="#999"/>`, cpLeft, cpTop, pw, ph)
	for i := 0; i <= 4; i++ {
		y := lo + (hi-lo)*float64(i)/4
		_, py := at(0, y)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end" fill="#444">%s</text>`,
			cpLeft, py, float64(cpLeft)+pw, py, cpLeft-4, py+4, fmt.Sprintf("%.4g", y))
	}
	for i := 0; i <= 5; i++ {
		x := end * float64(i) / 5
		px, _ := at(x, lo)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle" fill="#444">%s</text>`, px, float64(cpTop)+ph+14, (time.Duration(x * 1e9)).Round(time.Second))
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">time since the first step</text>`, float64(cpLeft)+pw/2, float64(cpTop)+ph+30)
	for _, st := range steps {
		px, _ := at(st.Started.Sub(t0).Seconds(), lo)
		anchor, lx := "start", px+3
		if px > float64(cpLeft)+pw-30 {
			anchor, lx = "end", px-3
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.0f" stroke="#888" stroke-dasharray="2 3"/><text x="%.1f" y="%d" fill="#555" text-anchor="%s">%g%%</text>`,
			px, cpTop, px, float64(cpTop)+ph, lx, cpTop-6, anchor, st.Percent)
	}
	line := func(pts []pt, color, dash string, marker bool) {
		if len(pts) == 0 {
			return
		}
		var d strings.Builder
		for i, p := range pts {
			x, y := at(p.x, p.y)
			if i == 0 {
				fmt.Fprintf(&d, "M%.1f %.1f", x, y)
			} else {
				fmt.Fprintf(&d, " L%.1f %.1f", x, y)
			}
		}
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="2"%s/>`, d.String(), color, dash)
		if marker {
			for _, p := range pts {
				x, y := at(p.x, p.y)
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>`, x, y, color)
			}
		}
	}
	line(thrLine, "#c62828", ` stroke-dasharray="6 4" stroke-width="1.5"`, false)
	line(prodLine, baselineColor, ` stroke-dasharray="5 3"`, false)
	line(canaryLine, candidateColor, "", false)
	// The evaluations: what each decision saw.
	for _, p := range prodPts {
		x, y := at(p.x, p.y)
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="#fff" stroke="%s" stroke-width="1.5"/>`, x, y, baselineColor)
	}
	for _, p := range canaryPts {
		x, y := at(p.x, p.y)
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`, x, y, candidateColor)
	}
	if breachAt >= 0 && breachAt < len(s.Points) {
		p := s.Points[breachAt]
		y := 0.0
		if p.Canary != nil {
			y = *p.Canary
		} else {
			y = lo + (hi-lo)/2
		}
		x, py := at(p.Time.Sub(t0).Seconds(), y)
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="8" fill="none" stroke="#c62828" stroke-width="2"/>`, x, py)
	}
	// Two legend lines: the series, then the threshold (whose text is long).
	legend := []legendEntry{{candidateColor, "", "canary"}}
	if len(prodLine) > 0 {
		legend = append(legend, legendEntry{baselineColor, "5 3", "production"})
	}
	legend = append(legend, legendEntry{"#888", "", "dots: the evaluations"})
	x, y := float64(cpLeft), cpH+6
	for _, l := range legend {
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%d" x2="%.0f" y2="%d" stroke="%s" stroke-width="2" stroke-dasharray="%s"/><text x="%.0f" y="%d">%s</text>`,
			x, y, x+22, y, l.color, l.dash, x+26, y+4, html.EscapeString(l.text))
		x += 40 + textWidth(l.text, 11, false)
	}
	y += legendLineH
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#c62828" stroke-width="1.5" stroke-dasharray="6 4"/><text x="%d" y="%d">%s</text>`,
		cpLeft, y, cpLeft+22, y, cpLeft+26, y+4, html.EscapeString("threshold: "+s.Threshold))
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// constThreshold is a fixed bound (min or max), if the check has one.
func constThreshold(s canarynode.Series) (float64, bool) {
	switch {
	case s.Max != nil:
		return *s.Max, true
	case s.Min != nil:
		return *s.Min, true
	}
	return 0, false
}

// thresholdAt is the bound the canary's value was judged against at
// sample p: the fixed min or max, or production's value moved by the
// change threshold in the metric's direction.
func thresholdAt(s canarynode.Series, p canary.Sample) (float64, bool) {
	switch {
	case s.Max != nil:
		return *s.Max, true
	case s.Min != nil:
		return *s.Min, true
	case p.Production == nil:
		return 0, false
	}
	base := *p.Production
	sign := 1.0
	if s.Direction == "lower_is_better" {
		sign = -1
	}
	if s.Relative != nil {
		return base + sign**s.Relative*math.Abs(base), true
	}
	if s.Absolute != nil {
		return base + sign**s.Absolute, true
	}
	return 0, false
}
