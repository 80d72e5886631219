package report

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/retrain-ml/retrain/activities/evaluate"
	gatenode "github.com/retrain-ml/retrain/activities/gate"

	"github.com/retrain-ml/retrain/internal/gate"
	"github.com/retrain-ml/retrain/internal/number"
	"github.com/retrain-ml/retrain/runs"
)

// Write renders r as an HTML page whose links o says.
func Write(w io.Writer, r *Report, o Options) error {
	return page.Execute(w, view(r, o))
}

type pageView struct {
	Title, Status, Error, Started, Duration string
	Params                                  string
	Reused                                  string // "reused from run R: nodes a, b" of a rerun
	Deploys                                 []deployView
	Links                                   []linkView
	Data                                    []dataView
	DAG                                     template.HTML
	Timeline                                template.HTML
	Nodes                                   []nodeView
	Compensations                           []nodeView
	Curves                                  []curveView
	Stats                                   []statsView
	Evaluations                             []evalView
	Gates                                   []gateView
	Canaries                                []canaryView
	Notes                                   []string
}

type nodeView struct {
	ID, Type, Status, Attempts, Started, Duration, Detail string
	S3                                                    string // requests, bytes and time waiting on S3, if any
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
	Scope                     string
	ROC, Calibration          template.HTML
	Metrics                   []metricRow
	SliceColumn               string
	Slices                    []sliceRow
}

type metricRow struct{ Name, Candidate, Baseline, Diff string }

type sliceRow struct{ Slice, Count, CandAUC, BaseAUC, CandLogLoss, BaseLogLoss string }

func view(r *Report, o Options) pageView {
	res := r.Result
	v := pageView{
		Title:  res.Pipeline + " " + res.ID,
		Status: string(res.Status),
		Error:  res.Error,
		Notes:  r.Notes,
		Reused: runs.ReusedLine(res),
	}
	if !res.StartedAt.IsZero() {
		v.Started = res.StartedAt.Format(time.RFC3339)
	}
	if res.EndedAt != nil {
		v.Duration = res.EndedAt.Sub(res.StartedAt).Round(time.Millisecond).String()
	}
	if len(res.Params) > 0 {
		// name=value pairs with spaces between, so a long list wraps
		// inside the page instead of running off its right edge.
		var pairs []string
		for _, k := range slices.Sorted(maps.Keys(res.Params)) {
			b, _ := json.Marshal(res.Params[k])
			pairs = append(pairs, k+"="+string(b))
		}
		v.Params = strings.Join(pairs, ", ")
	}
	v.Deploys = deployments(res)
	v.Links = links(res, o, v.Deploys)
	for _, id := range slices.Sorted(maps.Keys(r.Splits)) {
		v.Data = append(v.Data, dataRows(id, r.Splits[id]))
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
	shown := liftShown(r.Lifts)
	for _, id := range slices.Sorted(maps.Keys(r.Evaluations)) {
		// An evaluation whose models a gate's lift shows in full would only
		// repeat it (and a control's alone reads as "no baseline").
		if e := r.Evaluations[id]; shown[LiftSide{Node: id}.key()] && (e.Baseline == nil || shown[LiftSide{Node: id, Baseline: true}.key()]) {
			continue
		}
		v.Evaluations = append(v.Evaluations, evalRows(id, r.Evaluations[id]))
	}
	for _, n := range res.Nodes {
		if d, ok := canaryDeploy(n); ok {
			v.Deploys = append(v.Deploys, d)
		}
		if cv, ok := canaryRows(n); ok {
			v.Canaries = append(v.Canaries, cv)
			// The banner and the section say why the canary failed.
			if n.Status == runs.NodeFailed && strings.HasSuffix(v.Error, n.Error) {
				v.Error = ""
			}
		}
		if n.Type == gatenode.GateType.Name {
			v.Gates = append(v.Gates, gateRows(n, r.Lifts[n.ID], skippedBy(res.Nodes, n.ID)))
			// The gate's line under the headline already says why the run failed.
			if n.Status == runs.NodeFailed && n.Error != "" && strings.HasSuffix(v.Error, n.Error) {
				v.Error = ""
			}
		}
	}
	return v
}

func nodeRow(n runs.NodeState) nodeView {
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
	case n.ReusedFrom != "":
		row.Detail = "reused from run " + n.ReusedFrom + ": " + summarize(n.Outputs)
	case n.NotReused != "":
		row.Detail = "ran again (" + n.NotReused + "): " + summarize(n.Outputs)
	default:
		row.Detail = summarize(n.Outputs)
	}
	if n.Cache != nil {
		// How the node cache served it, as of the run's own time.
		now := time.Now()
		if n.ScheduledAt != nil {
			now = *n.ScheduledAt
		}
		row.Detail = strings.TrimSuffix(n.Cache.Note(now)+"; "+row.Detail, "; ")
	}
	row.S3 = s3Usage(n.Outputs)
	return row
}

// s3Usage says what a node asked of S3 (its "s3" output, which the worker
// adds to every node that made requests): "429 requests, 12.3 MB, 1.2s
// waiting".
func s3Usage(out map[string]any) string {
	u, ok := out["s3"].(map[string]any)
	if !ok {
		return ""
	}
	req, _ := u["requests"].(float64)
	if req == 0 {
		return ""
	}
	b, _ := u["bytes"].(float64)
	wait, _ := u["wait_ms"].(float64)
	return fmt.Sprintf("%s requests, %s, %s waiting", number.Count(int64(req)), humanBytes(b),
		(time.Duration(wait) * time.Millisecond).Round(time.Millisecond))
}

func humanBytes(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}

// summarize shows a node's scalar outputs briefly.
func summarize(out map[string]any) string {
	// A built-in node says what it did in one line.
	if s, ok := out["summary"].(string); ok && s != "" {
		return s
	}
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

func evalRows(id string, e *evaluate.EvaluationReport) evalView {
	ev := evalView{Node: id, Baseline: e.BaselineVersion, Candidate: e.CandidateID, Scope: evalScope(e), SliceColumn: e.SliceColumn}
	series := []plotSeries{{Name: "candidate", Color: candidateColor, ROC: e.Candidate.ROC, Bins: e.Candidate.CalibrationBins,
		AUC: fig(e.Candidate.Overall[evaluate.MetricAUC], true)}}
	if ev.Baseline == "" {
		ev.Baseline = "none (no production model yet)"
	}
	if e.Baseline != nil {
		series = append(series, plotSeries{Name: "baseline " + e.BaselineVersion, Color: baselineColor, Dashed: true, ROC: e.Baseline.ROC,
			Bins: e.Baseline.CalibrationBins, AUC: fig(e.Baseline.Overall[evaluate.MetricAUC], true)})
	}
	if slices.ContainsFunc(series, func(s plotSeries) bool { return len(s.ROC) > 0 }) {
		ev.ROC = rocSVG(series)
	}
	if slices.ContainsFunc(series, func(s plotSeries) bool { return len(s.Bins) > 0 }) {
		ev.Calibration = calibrationSVG(series)
	}
	for _, m := range []string{evaluate.MetricAUC, evaluate.MetricLogLoss, evaluate.MetricAccuracy, evaluate.MetricCalibration, "mean_prediction", "mean_label"} {
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
			CandAUC: fig(cm[evaluate.MetricAUC], true), CandLogLoss: fig(cm[evaluate.MetricLogLoss], true), BaseAUC: "–", BaseLogLoss: "–"}
		if e.Baseline != nil {
			if bm, ok := e.Baseline.Slices[s]; ok {
				row.BaseAUC, row.BaseLogLoss = fig(bm[evaluate.MetricAUC], true), fig(bm[evaluate.MetricLogLoss], true)
			}
		}
		ev.Slices = append(ev.Slices, row)
	}
	return ev
}

var page = template.Must(template.New("report").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width"><title>{{.Title}}</title>
<style>
body{font-family:sans-serif;margin:24px;color:#222;max-width:1232px}
h1{font-size:20px;margin:0 0 6px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ddd}h3{font-size:14px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f4f4f4}.status-succeeded{color:#186a1b}.status-failed{color:#a31515}.detail{font-family:monospace;font-size:12px;word-break:break-all}
.fail{color:#a31515;font-weight:bold}.note{color:#8a5a00}.num{text-align:right;font-variant-numeric:tabular-nums}
.box{max-width:100%;overflow-x:auto}
.banner{border-radius:8px;padding:12px 16px;margin:12px 0;font-size:15px}
.banner b{font-size:22px;margin-right:10px}
.deployed{background:#e3f4e4;border:1px solid #7cc47f}.notdeployed{background:#fbe9e9;border:1px solid #e08b8b}
.links{font-size:14px;line-height:1.7}.links td{border:none;padding:0 12px 0 0}code{background:#f4f4f4;padding:1px 4px;border-radius:3px}
.bar{display:inline-block;height:8px;background:#1f6fb5;vertical-align:middle;margin-right:6px}.bar.eval{background:#d9731a}
.barcell{width:170px;white-space:nowrap}
.better{color:#186a1b}.worse{color:#a31515}.ungated td{color:#666}.lift td:nth-child(-n+7),.lift th{white-space:nowrap}
.plots{display:flex;flex-wrap:wrap;gap:24px;margin-top:12px}.plots figure{margin:0}.plots figcaption{font-size:13px;font-weight:bold;margin-bottom:4px}
</style></head><body>
<h1>Run {{.Title}}: <span class="status-{{.Status}}">{{.Status}}</span></h1>
{{range .Deploys}}<div class="banner {{if .Deployed}}deployed{{else}}notdeployed{{end}}"><b>{{.Text}}</b>{{.Detail}}</div>
{{end}}{{range .Gates}}<p><b>{{.Title}}: {{.Verdict}}.</b> {{.Reason}}{{if .Forced}} <span class="note">{{.Forced}}</span>{{end}}</p>
{{end}}{{if .Error}}<p class="fail">{{.Error}}</p>{{end}}
<table class="links">
{{range .Links}}<tr><td>{{.Label}}</td><td>{{if .Href}}<a href="{{.Href}}">{{.Text}}</a>{{else}}<code>{{.Text}}</code>{{end}}{{if .Command}} &nbsp; <code>{{.Command}}</code>{{end}}</td></tr>
{{end}}</table>
<p>Started {{.Started}}{{if .Duration}}, took {{.Duration}}{{end}}.{{if .Params}} Params: <code>{{.Params}}</code>{{end}}</p>{{if .Reused}}<p>{{.Reused}}.</p>{{end}}

{{range .Canaries}}<h2 id="canary-{{.Node}}">{{.Title}}: {{.Decision}}</h2>
<p>{{.Reason}}</p>
<table><tr><th>step</th><th>traffic</th><th>bake</th><th>started</th><th>took</th><th>outcome</th><th>checks when the step ended: status (canary / production, samples passed)</th></tr>
{{range .Steps}}<tr><td class="num">{{.N}}</td><td class="num">{{.Percent}}</td><td>{{.Bake}}</td><td>{{.Started}}</td><td>{{.Took}}</td><td{{if .Breached}} class="fail"{{end}}>{{.Outcome}}</td><td>{{range .Checks}}<div{{if eq .Status "breach"}} class="fail"{{end}}>{{.Name}}: {{.Status}} ({{.Canary}} / {{.Production}}, {{.Samples}}) <span class="note">{{.Reason}}</span></div>{{end}}</td></tr>
{{end}}</table>
<div class="plots">{{range .Plots}}<figure style="max-width:560px"><figcaption>{{.Check}}: {{.Verdict}}</figcaption>{{.SVG}}<div class="detail" style="max-width:560px">{{.Query}}{{if .ProductionQuery}}<br>production: {{.ProductionQuery}}{{end}}</div></figure>
{{end}}</div>{{end}}

{{range .Data}}<h2>Data: {{.Node}}{{if .Reused}} (reused from an earlier attempt){{end}}</h2>
<table><tr><th></th><th>dates</th><th class="num">rows</th></tr>
<tr><td>run window</td><td>{{.Window}}</td><td class="num">{{.TrainRows}} + {{.EvalRows}}</td></tr>
<tr><td>trained on</td><td title="{{.TrainDatesAll}}">{{.TrainDates}}</td><td class="num">{{.TrainRows}}</td></tr>
<tr><td>held out (evaluated on)</td><td title="{{.EvalDatesAll}}">{{.EvalDates}}</td><td class="num">{{.EvalRows}}</td></tr>
</table>
{{if .Features}}<h3>Null rates of the rows trained on and held out</h3>
<table><tr><th>feature</th><th>kind</th><th>train nulls</th><th>held-out nulls</th><th>limit</th></tr>
{{range .Features}}<tr{{if .Over}} class="fail"{{end}}><td>{{.Feature}}</td><td>{{.Kind}}</td><td class="barcell"><span class="bar" style="width:{{.TrainPct}}"></span>{{.Train}}</td><td class="barcell"><span class="bar eval" style="width:{{.EvalPct}}"></span>{{.Eval}}</td><td>{{.Limit}}</td></tr>
{{end}}</table>{{end}}{{end}}

{{range .Evaluations}}<h2>Candidate vs baseline: {{.Node}}</h2>
<p>{{.Scope}}. Candidate {{.Candidate}}; baseline {{.Baseline}}.</p>
<table><tr><th>metric</th><th>candidate</th><th>baseline</th><th>candidate − baseline</th></tr>
{{range .Metrics}}<tr><td>{{.Name}}</td><td class="num">{{.Candidate}}</td><td class="num">{{.Baseline}}</td><td class="num">{{.Diff}}</td></tr>
{{end}}</table>
{{if or .ROC .Calibration}}<div class="plots">{{if .ROC}}<figure><figcaption>ROC curve</figcaption>{{.ROC}}</figure>{{end}}
{{if .Calibration}}<figure><figcaption>Calibration (reliability diagram, 10 bins; marker area ∝ rows)</figcaption>{{.Calibration}}</figure>{{end}}</div>{{end}}
{{if .Slices}}<h3>Per slice ({{.SliceColumn}})</h3>
<table><tr><th>slice</th><th>rows</th><th>candidate AUC</th><th>baseline AUC</th><th>candidate log loss</th><th>baseline log loss</th></tr>
{{range .Slices}}<tr><td>{{.Slice}}</td><td class="num">{{.Count}}</td><td class="num">{{.CandAUC}}</td><td class="num">{{.BaseAUC}}</td><td class="num">{{.CandLogLoss}}</td><td class="num">{{.BaseLogLoss}}</td></tr>
{{end}}</table>{{end}}{{end}}

{{range .Gates}}<h2 id="gate-{{.Node}}">{{.Title}}: {{.Verdict}}</h2>
<p>{{.Reason}}</p>{{if .Forced}}<p class="note">{{.Forced}}</p>{{end}}{{if .Baseline}}<p>{{.Baseline}}</p>{{end}}{{if .Sources}}<p>{{.Sources}}</p>{{end}}
{{if .Comparisons}}<h3>Lift per metric</h3>
<table class="lift"><tr><th>metric</th><th>candidate</th><th>{{.BaseName}}</th><th>lift (candidate − {{.BaseName}})</th><th>relative lift</th><th>threshold</th><th>result</th><th>why</th></tr>
{{range .Comparisons}}<tr{{if not .Gated}} class="ungated"{{end}}><td>{{.Metric}}</td><td class="num">{{.Candidate}}</td><td class="num">{{.Baseline}}</td><td class="num {{.LiftClass}}">{{.Lift}}</td><td class="num {{.LiftClass}}">{{.Relative}}</td><td class="num">{{.Threshold}}</td><td{{if eq .Result "FAIL"}} class="fail"{{end}}>{{.Result}}</td><td>{{.Reason}}</td></tr>
{{end}}</table>{{end}}
{{if .Slices}}<h3>Lift per slice ({{.SliceColumn}})</h3>
{{$base := .BaseName}}<table><tr><th rowspan="2">{{.SliceColumn}}</th><th rowspan="2">rows</th>{{range .SliceMetrics}}<th colspan="3">{{.}}</th>{{end}}</tr>
<tr>{{range .SliceMetrics}}<th>candidate</th><th>{{$base}}</th><th>lift</th>{{end}}</tr>
{{range .Slices}}<tr><td>{{.Slice}}{{if .Missing}} <span class="note">({{.Missing}})</span>{{end}}</td><td class="num">{{.Rows}}</td>{{range .Cells}}<td class="num">{{.Candidate}}</td><td class="num">{{.Baseline}}</td><td class="num {{.Class}}">{{.Lift}}</td>{{end}}</tr>
{{end}}</table>{{end}}{{if .SlicesNote}}<p class="note">{{.SlicesNote}}</p>{{end}}
{{if or .ROC .Calibration}}<div class="plots">{{if .ROC}}<figure><figcaption>ROC curves: candidate and {{.BaseName}}</figcaption>{{.ROC}}</figure>{{end}}
{{if .Calibration}}<figure><figcaption>Calibration (reliability diagram, 10 bins; marker area ∝ rows)</figcaption>{{.Calibration}}</figure>{{end}}</div>{{end}}{{end}}

<h2>DAG</h2>
<div class="box">{{.DAG}}</div>

<h2>Node timings</h2>
<div class="box">{{.Timeline}}</div>
<table><tr><th>node</th><th>type</th><th>status</th><th>attempts</th><th>started</th><th>took</th><th>S3</th><th>outputs / error</th></tr>
{{range .Nodes}}<tr><td>{{.ID}}</td><td>{{.Type}}</td><td class="status-{{.Status}}">{{.Status}}</td><td>{{.Attempts}}</td><td>{{.Started}}</td><td>{{.Duration}}</td><td>{{.S3}}</td><td class="detail">{{.Detail}}</td></tr>
{{end}}</table>
{{if .Compensations}}<h3>Compensations (on_failure)</h3>
<table><tr><th>node</th><th>type</th><th>status</th><th>attempts</th><th>started</th><th>took</th><th>S3</th><th>outputs / error</th></tr>
{{range .Compensations}}<tr><td>{{.ID}}</td><td>{{.Type}}</td><td class="status-{{.Status}}">{{.Status}}</td><td>{{.Attempts}}</td><td>{{.Started}}</td><td>{{.Duration}}</td><td>{{.S3}}</td><td class="detail">{{.Detail}}</td></tr>
{{end}}</table>{{end}}

{{range .Stats}}<h2>Feature statistics: {{.Node}} ({{.Table}}, {{.Rows}} rows)</h2>
<div class="box"><table><tr><th>column</th><th>type</th><th>nulls</th><th>mean</th><th>std</th><th>min</th><th>p50</th><th>p99</th><th>max</th><th>distinct≈</th></tr>
{{range .Columns}}<tr><td>{{.Name}}</td><td>{{.Type}}</td><td class="num">{{.NullRate}}</td><td class="num">{{.Mean}}</td><td class="num">{{.Std}}</td><td class="num">{{.Min}}</td><td class="num">{{.P50}}</td><td class="num">{{.P99}}</td><td class="num">{{.Max}}</td><td class="num">{{.Distinct}}</td></tr>
{{end}}</table></div>{{end}}

{{range .Curves}}<h2>Loss curve: {{.Node}}</h2>
<p>{{.Last}} (training loss of each step's batch)</p>
<div class="box">{{.SVG}}</div>{{end}}

{{if .Notes}}<h2>Notes</h2><ul>{{range .Notes}}<li class="note">{{.}}</li>{{end}}</ul>{{end}}
</body></html>
`))

// skippedBy lists the nodes skipped because a `when` reading node id's
// outputs was false.
func skippedBy(nodes []runs.NodeState, id string) []string {
	var out []string
	for _, n := range nodes {
		if n.Status == runs.NodeSkipped && strings.Contains(n.Reason, "nodes."+id+".") {
			out = append(out, n.ID)
		}
	}
	return out
}
