package report

import (
	"encoding/json"
	"fmt"
	"html"
	"html/template"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/retrain-ml/retrain/activities"
	"github.com/retrain-ml/retrain/gate"
	"github.com/retrain-ml/retrain/workflows"
)

// Write renders r as an HTML page.
func Write(w io.Writer, r *Report) error {
	return page.Execute(w, view(r))
}

type pageView struct {
	Title, Status, Error, Started, Duration string
	Params                                  string
	DAG                                     template.HTML
	Timeline                                template.HTML
	Nodes                                   []nodeView
	Compensations                           []nodeView
	Curves                                  []curveView
	Stats                                   []statsView
	Evaluations                             []evalView
	Gates                                   []gateView
	Notes                                   []string
}

type nodeView struct {
	ID, Type, Status, Attempts, Started, Duration, Detail string
}

type curveView struct {
	Node string
	SVG  template.HTML
	Last string
}

type statsView struct {
	Node, Table string
	Rows        int64
	Columns     []statsRow
}

type statsRow struct {
	Name, Type, NullRate, Mean, Std, Min, P50, P99, Max string
	Distinct                                            int64
}

type evalView struct {
	Node, Baseline, Candidate string
	Rows                      int
	Metrics                   []metricRow
	SliceColumn               string
	Slices                    []sliceRow
}

type metricRow struct{ Name, Candidate, Baseline, Diff string }

type sliceRow struct{ Slice, Count, CandAUC, BaseAUC, CandLogLoss, BaseLogLoss string }

type gateView struct {
	Node, Verdict, Reason, Forced string
	Comparisons                   []comparisonRow
}

type comparisonRow struct{ Metric, Check, Candidate, Baseline, Threshold, Result, Reason string }

func view(r *Report) pageView {
	res := r.Result
	v := pageView{
		Title:  res.Pipeline + " " + res.ID,
		Status: string(res.Status),
		Error:  res.Error,
		Notes:  r.Notes,
	}
	if !res.StartedAt.IsZero() {
		v.Started = res.StartedAt.Format(time.RFC3339)
	}
	if res.EndedAt != nil {
		v.Duration = res.EndedAt.Sub(res.StartedAt).Round(time.Millisecond).String()
	}
	if len(res.Params) > 0 {
		b, _ := json.Marshal(res.Params)
		v.Params = string(b)
	}
	v.DAG = dagSVG(res.Nodes, r.Edges)
	v.Timeline = timelineSVG(res)
	for _, n := range res.Nodes {
		v.Nodes = append(v.Nodes, nodeRow(n))
	}
	for _, n := range res.Compensations {
		row := nodeRow(n)
		row.ID = n.ID + " (compensates " + n.Compensates + ")"
		v.Compensations = append(v.Compensations, row)
	}
	for _, id := range slices.Sorted(maps.Keys(r.Curves)) {
		c := r.Curves[id]
		cv := curveView{Node: id, SVG: curveSVG(c)}
		if len(c) > 0 {
			last := c[len(c)-1]
			cv.Last = fmt.Sprintf("step %d, loss %.4f", last.Step, last.Loss)
		}
		v.Curves = append(v.Curves, cv)
	}
	for _, id := range slices.Sorted(maps.Keys(r.Stats)) {
		s := r.Stats[id]
		sv := statsView{Node: id, Table: s.Table, Rows: s.Rows}
		for _, c := range s.Columns {
			name := c.Name
			if c.Of != "" {
				name += " (" + c.Of + ")"
			}
			sv.Columns = append(sv.Columns, statsRow{
				Name: name, Type: c.Type, NullRate: fmt.Sprintf("%.1f%%", 100*c.NullRate),
				Mean: opt(c.Mean), Std: opt(c.Std), Min: opt(c.Min), P50: opt(c.P50), P99: opt(c.P99), Max: opt(c.Max),
				Distinct: c.Distinct,
			})
		}
		v.Stats = append(v.Stats, sv)
	}
	for _, id := range slices.Sorted(maps.Keys(r.Evaluations)) {
		v.Evaluations = append(v.Evaluations, evalRows(id, r.Evaluations[id]))
	}
	for _, n := range res.Nodes {
		if n.Type == activities.GateType.Name {
			v.Gates = append(v.Gates, gateRows(n))
		}
	}
	return v
}

func nodeRow(n workflows.NodeState) nodeView {
	row := nodeView{ID: n.ID, Type: n.Type, Status: string(n.Status)}
	if n.Attempts > 0 {
		row.Attempts = fmt.Sprint(n.Attempts)
	}
	if n.StartedAt != nil {
		row.Started = n.StartedAt.Format("15:04:05.000")
		if n.EndedAt != nil {
			row.Duration = n.EndedAt.Sub(*n.StartedAt).Round(time.Millisecond).String()
		}
	}
	switch {
	case n.Error != "":
		row.Detail = n.Error
	case n.Reason != "":
		row.Detail = n.Reason
	default:
		row.Detail = summarize(n.Outputs)
	}
	return row
}

// summarize shows a node's scalar outputs briefly.
func summarize(out map[string]any) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(out)) {
		switch x := out[k].(type) {
		case string:
			if len(x) > 60 {
				x = "…" + x[len(x)-57:]
			}
			parts = append(parts, k+"="+x)
		case float64:
			parts = append(parts, k+"="+num(x))
		case bool:
			parts = append(parts, fmt.Sprintf("%s=%t", k, x))
		}
	}
	s := strings.Join(parts, " ")
	if len(s) > 400 {
		s = s[:400] + "…"
	}
	return s
}

func num(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return fmt.Sprintf("%.0f", f)
	}
	return fmt.Sprintf("%.4g", f)
}

func opt(f *float64) string {
	if f == nil {
		return "–"
	}
	return fmt.Sprintf("%.4g", *f)
}

func fig(n gate.Number, ok bool) string {
	if !ok {
		return "–"
	}
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return n.String()
	}
	return fmt.Sprintf("%.4f", f)
}

func evalRows(id string, e *activities.EvaluationReport) evalView {
	ev := evalView{Node: id, Baseline: e.BaselineVersion, Candidate: e.CandidateID, Rows: e.Rows, SliceColumn: e.SliceColumn}
	if ev.Baseline == "" {
		ev.Baseline = "none (no production model yet)"
	}
	for _, m := range []string{activities.MetricAUC, activities.MetricLogLoss, activities.MetricAccuracy, activities.MetricCalibration, "mean_prediction", "mean_label"} {
		c, cok := e.Candidate.Overall[m]
		row := metricRow{Name: m, Candidate: fig(c, cok), Baseline: "–", Diff: "–"}
		if e.Baseline != nil {
			b, bok := e.Baseline.Overall[m]
			row.Baseline = fig(b, bok)
			if cok && bok {
				row.Diff = fmt.Sprintf("%+.4f", float64(c)-float64(b))
			}
		}
		ev.Metrics = append(ev.Metrics, row)
	}
	for _, s := range slices.Sorted(maps.Keys(e.Candidate.Slices)) {
		cm := e.Candidate.Slices[s]
		row := sliceRow{Slice: s, Count: fmt.Sprintf("%.0f", float64(cm["count"])),
			CandAUC: fig(cm[activities.MetricAUC], true), CandLogLoss: fig(cm[activities.MetricLogLoss], true), BaseAUC: "–", BaseLogLoss: "–"}
		if e.Baseline != nil {
			if bm, ok := e.Baseline.Slices[s]; ok {
				row.BaseAUC, row.BaseLogLoss = fig(bm[activities.MetricAUC], true), fig(bm[activities.MetricLogLoss], true)
			}
		}
		ev.Slices = append(ev.Slices, row)
	}
	return ev
}

func gateRows(n workflows.NodeState) gateView {
	g := gateView{Node: n.ID}
	switch {
	case n.Status == workflows.NodeSucceeded && n.Outputs["passed"] == true:
		g.Verdict = "passed"
	case n.Status == workflows.NodeSucceeded:
		g.Verdict = "rejected (deploy skipped)"
	case n.Status == workflows.NodeFailed:
		g.Verdict = "rejected (run failed)"
	default:
		g.Verdict = string(n.Status)
	}
	g.Reason, _ = n.Outputs["reason"].(string)
	if n.Error != "" {
		g.Reason = n.Error
	}
	if n.Outputs["forced"] == true {
		g.Forced = fmt.Sprintf("forced by %v: %v", n.Outputs["forced_by"], n.Outputs["force_reason"])
	}
	// Comparisons come back from history as generic JSON.
	var cs []gate.Comparison
	if b, err := json.Marshal(n.Outputs["comparisons"]); err == nil {
		_ = json.Unmarshal(b, &cs)
	}
	for _, c := range cs {
		row := comparisonRow{Metric: c.Metric, Check: string(c.Check), Threshold: fig(c.Threshold, true), Reason: c.Reason,
			Candidate: "–", Baseline: "–", Result: "pass"}
		if c.Candidate != nil {
			row.Candidate = fig(*c.Candidate, true)
		}
		if c.Baseline != nil {
			row.Baseline = fig(*c.Baseline, true)
		}
		switch {
		case c.Skipped:
			row.Result = "skipped"
		case !c.Passed:
			row.Result = "FAIL"
		}
		g.Comparisons = append(g.Comparisons, row)
	}
	return g
}

var statusColor = map[workflows.NodeStatus]string{
	workflows.NodeSucceeded: "#c8ecc9",
	workflows.NodeFailed:    "#f6c1c1",
	workflows.NodeSkipped:   "#e4e4e4",
	workflows.NodeCancelled: "#f3dfb3",
	workflows.NodeRunning:   "#c6dcf5",
	workflows.NodePending:   "#ffffff",
}

// dagSVG draws the DAG left to right: a node's column is the length of the
// longest path of needs to it; nodes of a column are stacked in plan order.
func dagSVG(nodes []workflows.NodeState, edges map[string][]string) template.HTML {
	const bw, bh, gx, gy, pad = 150, 40, 60, 18, 10
	level := map[string]int{}
	var depth func(id string, seen map[string]bool) int
	depth = func(id string, seen map[string]bool) int {
		if l, ok := level[id]; ok {
			return l
		}
		if seen[id] {
			return 0 // a cycle cannot pass validation; stay finite anyway
		}
		seen[id] = true
		l := 0
		for _, n := range edges[id] {
			l = max(l, depth(n, seen)+1)
		}
		level[id] = l
		return l
	}
	rows := map[int]int{}
	pos := map[string][2]int{}
	maxX, maxY := 0, 0
	for _, n := range nodes {
		l := depth(n.ID, map[string]bool{})
		x, y := pad+l*(bw+gx), pad+rows[l]*(bh+gy)
		rows[l]++
		pos[n.ID] = [2]int{x, y}
		maxX, maxY = max(maxX, x+bw), max(maxY, y+bh)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`, maxX+pad, maxY+pad)
	b.WriteString(`<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#777"/></marker></defs>`)
	for _, n := range nodes {
		to := pos[n.ID]
		for _, need := range edges[n.ID] {
			from, ok := pos[need]
			if !ok {
				continue
			}
			fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#777" marker-end="url(#arrow)"/>`,
				from[0]+bw, from[1]+bh/2, to[0], to[1]+bh/2)
		}
	}
	for _, n := range nodes {
		p := pos[n.ID]
		color := statusColor[n.Status]
		if color == "" {
			color = "#fff"
		}
		fmt.Fprintf(&b, `<g><title>%s</title><rect x="%d" y="%d" width="%d" height="%d" rx="6" fill="%s" stroke="#555"/>`,
			html.EscapeString(n.ID+": "+string(n.Status)+" "+n.Error+n.Reason), p[0], p[1], bw, bh, color)
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" font-weight="bold">%s</text>`, p[0]+bw/2, p[1]+16, html.EscapeString(n.ID))
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" fill="#444">%s · %s</text></g>`, p[0]+bw/2, p[1]+32, html.EscapeString(n.Type), html.EscapeString(string(n.Status)))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // every text above is escaped
}

// timelineSVG draws one bar per node that ran, on the run's time axis.
func timelineSVG(res *workflows.Result) template.HTML {
	const w, rowH, label = 700, 18, 130
	start := res.StartedAt
	end := start
	var ran []workflows.NodeState
	for _, n := range append(slices.Clone(res.Nodes), res.Compensations...) {
		if n.StartedAt == nil || n.EndedAt == nil {
			continue
		}
		ran = append(ran, n)
		if n.EndedAt.After(end) {
			end = *n.EndedAt
		}
		if start.IsZero() || n.StartedAt.Before(start) {
			start = *n.StartedAt
		}
	}
	if len(ran) == 0 {
		return ""
	}
	span := max(end.Sub(start).Seconds(), 1e-3)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`, label+w+70, rowH*len(ran)+24)
	for i, n := range ran {
		x0 := label + int(float64(w)*n.StartedAt.Sub(start).Seconds()/span)
		x1 := label + int(float64(w)*n.EndedAt.Sub(start).Seconds()/span)
		y := 4 + i*rowH
		color := statusColor[n.Status]
		fmt.Fprintf(&b, `<text x="0" y="%d">%s</text><rect x="%d" y="%d" width="%d" height="%d" fill="%s" stroke="#555"/><text x="%d" y="%d" fill="#444">%s</text>`,
			y+12, html.EscapeString(n.ID), x0, y, max(x1-x0, 2), rowH-4, color, max(x1, x0+2)+4, y+12,
			n.EndedAt.Sub(*n.StartedAt).Round(time.Millisecond))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#444">0</text><text x="%d" y="%d" text-anchor="end" fill="#444">%.1fs</text>`,
		label, rowH*len(ran)+20, label+w, rowH*len(ran)+20, span)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// curveSVG plots loss against step.
func curveSVG(c []activities.CurvePoint) template.HTML {
	if len(c) == 0 {
		return ""
	}
	const w, h, left, bottom = 640, 240, 60, 30
	minS, maxS := c[0].Step, c[len(c)-1].Step
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range c {
		lo, hi = math.Min(lo, p.Loss), math.Max(hi, p.Loss)
	}
	if hi == lo {
		hi = lo + 1
	}
	if maxS == minS {
		maxS = minS + 1
	}
	var pts []string
	for _, p := range c {
		x := left + float64(w)*float64(p.Step-minS)/float64(maxS-minS)
		y := 10 + float64(h)*(1-(p.Loss-lo)/(hi-lo))
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`, left+w+20, h+bottom+20)
	fmt.Fprintf(&b, `<line x1="%d" y1="10" x2="%d" y2="%d" stroke="#999"/><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`,
		left, left, h+10, left, h+10, left+w, h+10)
	fmt.Fprintf(&b, `<text x="%d" y="16" text-anchor="end">%.4f</text><text x="%d" y="%d" text-anchor="end">%.4f</text>`, left-4, hi, left-4, h+10, lo)
	fmt.Fprintf(&b, `<text x="%d" y="%d">step %d</text><text x="%d" y="%d" text-anchor="end">step %d</text>`, left, h+26, minS, left+w, h+26, maxS)
	fmt.Fprintf(&b, `<polyline fill="none" stroke="#1f6fb5" stroke-width="1.5" points="%s"/>`, strings.Join(pts, " "))
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

var page = template.Must(template.New("report").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body{font-family:sans-serif;margin:24px;color:#222}
h1{font-size:20px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f4f4f4}.status-succeeded{color:#186a1b}.status-failed{color:#a31515}.detail{font-family:monospace;font-size:12px;max-width:720px;word-break:break-all}
.fail{color:#a31515;font-weight:bold}.note{color:#8a5a00}
</style></head><body>
<h1>Run {{.Title}}: <span class="status-{{.Status}}">{{.Status}}</span></h1>
<p>Started {{.Started}}{{if .Duration}}, took {{.Duration}}{{end}}.{{if .Params}} Params: <code>{{.Params}}</code>{{end}}</p>
{{if .Error}}<p class="fail">{{.Error}}</p>{{end}}

<h2>DAG</h2>
{{.DAG}}

<h2>Node timings</h2>
{{.Timeline}}
<table><tr><th>node</th><th>type</th><th>status</th><th>attempts</th><th>started</th><th>took</th><th>outputs / error</th></tr>
{{range .Nodes}}<tr><td>{{.ID}}</td><td>{{.Type}}</td><td class="status-{{.Status}}">{{.Status}}</td><td>{{.Attempts}}</td><td>{{.Started}}</td><td>{{.Duration}}</td><td class="detail">{{.Detail}}</td></tr>
{{end}}</table>
{{if .Compensations}}<h3>Compensations (on_failure)</h3>
<table><tr><th>node</th><th>type</th><th>status</th><th>attempts</th><th>started</th><th>took</th><th>outputs / error</th></tr>
{{range .Compensations}}<tr><td>{{.ID}}</td><td>{{.Type}}</td><td class="status-{{.Status}}">{{.Status}}</td><td>{{.Attempts}}</td><td>{{.Started}}</td><td>{{.Duration}}</td><td class="detail">{{.Detail}}</td></tr>
{{end}}</table>{{end}}

{{range .Stats}}<h2>Feature statistics: {{.Node}} ({{.Table}}, {{.Rows}} rows)</h2>
<table><tr><th>column</th><th>type</th><th>nulls</th><th>mean</th><th>std</th><th>min</th><th>p50</th><th>p99</th><th>max</th><th>distinct≈</th></tr>
{{range .Columns}}<tr><td>{{.Name}}</td><td>{{.Type}}</td><td>{{.NullRate}}</td><td>{{.Mean}}</td><td>{{.Std}}</td><td>{{.Min}}</td><td>{{.P50}}</td><td>{{.P99}}</td><td>{{.Max}}</td><td>{{.Distinct}}</td></tr>
{{end}}</table>{{end}}

{{range .Curves}}<h2>Loss curve: {{.Node}}</h2>
<p>{{.Last}} (training loss of each step's batch)</p>
{{.SVG}}{{end}}

{{range .Evaluations}}<h2>Candidate vs baseline: {{.Node}}</h2>
<p>{{.Rows}} held-out rows. Candidate {{.Candidate}}; baseline {{.Baseline}}.</p>
<table><tr><th>metric</th><th>candidate</th><th>baseline</th><th>candidate − baseline</th></tr>
{{range .Metrics}}<tr><td>{{.Name}}</td><td>{{.Candidate}}</td><td>{{.Baseline}}</td><td>{{.Diff}}</td></tr>
{{end}}</table>
{{if .Slices}}<h3>Per slice ({{.SliceColumn}})</h3>
<table><tr><th>slice</th><th>rows</th><th>candidate AUC</th><th>baseline AUC</th><th>candidate log loss</th><th>baseline log loss</th></tr>
{{range .Slices}}<tr><td>{{.Slice}}</td><td>{{.Count}}</td><td>{{.CandAUC}}</td><td>{{.BaseAUC}}</td><td>{{.CandLogLoss}}</td><td>{{.BaseLogLoss}}</td></tr>
{{end}}</table>{{end}}{{end}}

{{range .Gates}}<h2>Gate: {{.Node}}: {{.Verdict}}</h2>
<p>{{.Reason}}</p>{{if .Forced}}<p class="note">{{.Forced}}</p>{{end}}
{{if .Comparisons}}<table><tr><th>metric</th><th>check</th><th>candidate</th><th>baseline</th><th>threshold</th><th>result</th><th>why</th></tr>
{{range .Comparisons}}<tr><td>{{.Metric}}</td><td>{{.Check}}</td><td>{{.Candidate}}</td><td>{{.Baseline}}</td><td>{{.Threshold}}</td><td{{if eq .Result "FAIL"}} class="fail"{{end}}>{{.Result}}</td><td>{{.Reason}}</td></tr>
{{end}}</table>{{end}}{{end}}

{{if .Notes}}<h2>Notes</h2><ul>{{range .Notes}}<li class="note">{{.}}</li>{{end}}</ul>{{end}}
</body></html>
`))
