package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/activities/evaluate"
	"github.com/retrain-ml/retrain/activities/train"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/internal/colstats"
	"github.com/retrain-ml/retrain/internal/dataset"
	"github.com/retrain-ml/retrain/internal/gate"
	"github.com/retrain-ml/retrain/internal/trainer"
	"github.com/retrain-ml/retrain/runs"
)

func TestReport(t *testing.T) {
	t0 := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	at := func(s float64) *time.Time { v := t0.Add(time.Duration(s * float64(time.Second))); return &v }
	res := &runs.Result{
		ID: "ctr-retrain-1", Pipeline: "ctr-retrain", Status: runs.StatusFailed, StartedAt: t0, EndedAt: at(9),
		Error: "node gate: gate rejected <candidate>",
		Nodes: []runs.NodeState{
			{ID: "stats", Type: "feature_stats", Status: runs.NodeSucceeded, Attempts: 1, StartedAt: at(0), EndedAt: at(1),
				Outputs: map[string]any{"report_uri": "s3://b/stats.json"}},
			{ID: "train", Type: "train", Status: runs.NodeSucceeded, Attempts: 2, StartedAt: at(1), EndedAt: at(5),
				Outputs: map[string]any{"loss_curve_uri": "s3://b/curve.json", "steps": 3.0}},
			{ID: "evaluate", Type: "evaluate", Status: runs.NodeSucceeded, Attempts: 1, StartedAt: at(5), EndedAt: at(6),
				Outputs: map[string]any{"metrics_uri": "s3://b/metrics.json"}},
			{ID: "gate", Type: "gate", Status: runs.NodeFailed, Attempts: 1, StartedAt: at(6), EndedAt: at(6.1),
				Error: "gate rejected <script>alert(1)</script>"},
			{ID: "deploy", Type: "deploy", Status: runs.NodeCancelled, Reason: "not started: the run failed"},
		},
		Compensations: []runs.NodeState{{ID: "rollback_table", Type: "rollback_table", Status: runs.NodeSucceeded,
			Compensates: "promote", StartedAt: at(7), EndedAt: at(7.2)}},
	}
	plan := &dags.Plan{Nodes: []dags.PlanNode{
		{ID: "stats"}, {ID: "train", Needs: []string{"stats"}}, {ID: "evaluate", Needs: []string{"train"}},
		{ID: "gate", Needs: []string{"evaluate"}}, {ID: "deploy", Needs: []string{"gate"}},
	}}
	mean := 0.5
	objects := map[string]any{
		"s3://b/stats.json": colstats.Report{Table: "ml.stage", Rows: 10, Columns: []colstats.Column{{Name: "ad_quality", Type: "double", Mean: &mean}}},
		"s3://b/curve.json": []train.CurvePoint{{Step: 1, Loss: 0.7}, {Step: 2, Loss: 0.5}, {Step: 3, Loss: 0.45}},
		"s3://b/metrics.json": evaluate.EvaluationReport{Rows: 100, CandidateID: "sha256:c", BaselineVersion: "v2",
			Candidate: evaluate.ModelMetrics{Overall: map[string]gate.Number{"auc": 0.53, "log_loss": 14.6}},
			Baseline:  &evaluate.ModelMetrics{Overall: map[string]gate.Number{"auc": 0.77, "log_loss": 0.39}}},
	}
	fetch := FetchFunc(func(_ context.Context, uri string) ([]byte, error) {
		v, ok := objects[uri]
		if !ok {
			return nil, errors.New("not found")
		}
		return json.Marshal(v)
	})
	r := Collect(context.Background(), fetch, res, plan)
	if len(r.Notes) != 0 || len(r.Curves["train"]) != 3 || r.Stats["stats"] == nil || r.Evaluations["evaluate"] == nil {
		t.Fatalf("collected %+v", r)
	}
	var b strings.Builder
	if err := Write(&b, r, Options{}); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{
		"<svg", "marker-end", // the DAG, with its edges
		"Loss curve: train", "<polyline", "step 3, loss 0.4500",
		"ad_quality", "Candidate vs baseline", "0.5300", "0.7700", "-0.2400", "v2",
		"rejected (run failed)", "rollback_table (compensates promote)",
		"&lt;script&gt;", // errors are escaped, in tables and in the SVG
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(page, "<script>") {
		t.Error("unescaped markup from a node's error")
	}

	// A missing object is noted, not fatal.
	delete(objects, "s3://b/curve.json")
	r = Collect(context.Background(), fetch, res, nil)
	if len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "curve.json") {
		t.Fatalf("notes %v", r.Notes)
	}
	if err := Write(&b, r, Options{}); err != nil {
		t.Fatal(err)
	}
}

// retrainRun is a finished ctr-retrain run that deployed v3 over v2, with
// the objects its nodes point at.
func retrainRun(t *testing.T) (*runs.Result, *dags.Plan, Fetcher) {
	t.Helper()
	t0 := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	at := func(s float64) *time.Time { v := t0.Add(time.Duration(s * float64(time.Second))); return &v }
	limit := 0.5
	split := Split{
		Window:     dataset.Window{Start: "2026-11-01", End: "2026-11-04"},
		TrainDates: []string{"2026-11-01", "2026-11-02", "2026-11-03"}, EvalDates: []string{"2026-11-04"},
		TrainRows: 22500, EvalRows: 7500,
		Coverage: []FeatureCoverage{
			{Feature: "ad_quality", Kind: "dense", TrainNullRate: 0.0125, EvalNullRate: 0.5625, MaxNullRate: &limit},
			{Feature: "u_<recent>_ads", Kind: "sparse", TrainNullRate: 0.25, EvalNullRate: 0.2},
		},
	}
	var splitOut map[string]any
	b, _ := json.Marshal(split)
	if err := json.Unmarshal(b, &splitOut); err != nil {
		t.Fatal(err)
	}
	splitOut["uri"] = "s3://b/checkpoints/split"
	res := &runs.Result{
		ID: "ctr-retrain/2026-11-20", Pipeline: "ctr-retrain", Status: runs.StatusSucceeded, StartedAt: t0, EndedAt: at(20),
		Nodes: []runs.NodeState{
			{ID: "stats_user", Type: "feature_stats", Status: runs.NodeSucceeded, Attempts: 1, StartedAt: at(0), EndedAt: at(1),
				Outputs: map[string]any{"report_uri": "s3://b/stats.json", "html_uri": "s3://b/runs/stats_user.html",
					"s3": map[string]any{"requests": 1429.0, "bytes": 12.5 * (1 << 20), "wait_ms": 1234.0}}},
			{ID: "a_node_with_a_really_long_identifier_that_will_not_fit", Type: "command", Status: runs.NodeSucceeded,
				Attempts: 1, StartedAt: at(0), EndedAt: at(1)},
			{ID: "split", Type: "split", Status: runs.NodeSucceeded, Attempts: 1, StartedAt: at(1), EndedAt: at(2), Outputs: splitOut},
			{ID: "train", Type: "train", Status: runs.NodeSucceeded, Attempts: 1, StartedAt: at(2), EndedAt: at(15)},
			{ID: "evaluate", Type: "evaluate", Status: runs.NodeSucceeded, Attempts: 1, StartedAt: at(15), EndedAt: at(16),
				Outputs: map[string]any{"metrics_uri": "s3://b/metrics.json"}},
			{ID: "gate", Type: "gate", Status: runs.NodeSucceeded, Attempts: 1, StartedAt: at(16), EndedAt: at(17),
				Outputs: map[string]any{"passed": true, "reason": "auc 0.7712 >= baseline 0.7690 - 0.005", "has_baseline": true,
					"baseline_version": "v2", "baseline_logical_date": "2026-11-19", "baseline_source": "evaluation"}},
			{ID: "deploy", Type: "deploy", Status: runs.NodeSucceeded, Attempts: 1, StartedAt: at(17), EndedAt: at(18),
				Outputs: map[string]any{"model": "ctr", "alias": "production", "version": "v3", "ref": "ctr@v3",
					"previous_version": "v2", "moved": true, "uri": "s3://b/models/ctr/versions/v3/"}},
		},
	}
	plan := &dags.Plan{Nodes: []dags.PlanNode{
		{ID: "stats_user"}, {ID: "a_node_with_a_really_long_identifier_that_will_not_fit"},
		{ID: "split", Needs: []string{"stats_user"}}, {ID: "train", Needs: []string{"split"}},
		{ID: "evaluate", Needs: []string{"train"}}, {ID: "gate", Needs: []string{"evaluate"}}, {ID: "deploy", Needs: []string{"gate"}},
	}}
	// Scores whose curves and bins come from trainer, as evaluate's do.
	preds := []float64{0.05, 0.1, 0.12, 0.3, 0.35, 0.5, 0.7, 0.9}
	labels := []float32{0, 0, 1, 0, 1, 0, 1, 1}
	basePreds := []float64{0.2, 0.1, 0.3, 0.3, 0.3, 0.6, 0.4, 0.5}
	model := func(p []float64) evaluate.ModelMetrics {
		return evaluate.ModelMetrics{
			Overall:         map[string]gate.Number{"auc": gate.Number(trainer.AUC(p, labels)), "log_loss": 0.4},
			ROC:             trainer.ROC(p, labels, trainer.DefaultROCPoints),
			CalibrationBins: trainer.CalibrationBins(p, labels, trainer.DefaultCalibrationBins),
		}
	}
	base := model(basePreds)
	objects := map[string]any{
		"s3://b/stats.json": colstats.Report{Table: "ml.stage_user", Rows: 10},
		"s3://b/metrics.json": evaluate.EvaluationReport{Rows: 7500, Dates: []string{"2026-11-04"},
			RunWindow: dataset.Window{Start: "2026-11-01", End: "2026-11-04"}, CandidateID: "sha256:c", BaselineVersion: "v2",
			Candidate: model(preds), Baseline: &base},
	}
	fetch := FetchFunc(func(_ context.Context, uri string) ([]byte, error) {
		v, ok := objects[uri]
		if !ok {
			return nil, errors.New("not found")
		}
		return json.Marshal(v)
	})
	return res, plan, fetch
}

func TestReportTellsTheStory(t *testing.T) {
	res, plan, fetch := retrainRun(t)
	r := Collect(context.Background(), fetch, res, plan)
	if len(r.Notes) != 0 || r.Splits["split"] == nil || r.Evaluations["evaluate"] == nil {
		t.Fatalf("collected %+v, notes %v", r, r.Notes)
	}
	var b strings.Builder
	err := Write(&b, r, Options{UIBase: "http://localhost:8233/", Namespace: "default", TemporalRunID: "0193-abc",
		StatsPages: map[string]string{"stats_user": "ctr-retrain_2026-11-20.files/stats_user.html"}})
	if err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{
		// The headline: what was deployed, over what, and the gate.
		"<b>Deployed ctr v3</b>production: v2 → v3", "<b>Gate: passed.</b>",
		"Baseline: v2, trained for 2026-11-19; both models scored on this run&#39;s rows.",
		// What each node asked of S3.
		"<td>1,429 requests, 12.5 MiB, 1.234s waiting</td>",
		// Links: the run's own execution (its id escaped), the stats page
		// next to the report, the model version and how to see it.
		`href="http://localhost:8233/namespaces/default/workflows/ctr-retrain%2F2026-11-20/0193-abc/history"`,
		`href="ctr-retrain_2026-11-20.files/stats_user.html"`,
		"s3://b/models/ctr/versions/v3/", "retrain model show ctr@v3",
		// The data: windows, dates, rows, null rates with their limit.
		"2026-11-01..2026-11-04", "2026-11-01 .. 2026-11-03 (3 days)", ">2026-11-04<", ">22500<", ">7500<",
		"ad_quality", "1.2%", "56.2%", "50.0%", "u_&lt;recent&gt;_ads", "25.0%", "none",
		`<tr class="fail"><td>ad_quality`, // held-out nulls above the limit
		// Candidate and baseline plots, each with both models.
		"ROC curve", "false positive rate", "Calibration", "mean prediction",
		"7500 held-out rows of 2026-11-04, in the run&#39;s window 2026-11-01..2026-11-04",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	for _, plot := range []string{svgAfter(t, page, "ROC curve"), svgAfter(t, page, "Calibration (")} {
		for _, want := range []string{`stroke="` + candidateColor + `"`, `stroke="` + baselineColor + `"`, "candidate", "baseline v2", "stroke-dasharray"} {
			if !strings.Contains(plot, want) {
				t.Errorf("plot lacks %q: %.300s", want, plot)
			}
		}
	}
	if !strings.Contains(svgAfter(t, page, "ROC curve"), "candidate (AUC 0.8125)") {
		t.Error("ROC legend lacks the candidate's AUC")
	}
	// The long node id is cut to fit the widest box; the tooltip has all of it.
	long := "a_node_with_a_really_long_identifier_that_will_not_fit"
	if cut := fitText(long, 200-12, 12, true); !strings.HasSuffix(cut, "…") || !strings.Contains(page, ">"+cut+"</text>") ||
		!strings.Contains(page, "<title>"+long+" (command)") {
		t.Errorf("long node id not drawn as %q with its whole id in the tooltip", cut)
	}
	for _, remote := range []string{"<script", " src=", "<link", "@import", "url(http"} {
		if strings.Contains(page, remote) {
			t.Errorf("the page has %q: a script or a remote asset", remote)
		}
	}
}

// svgAfter returns the first <svg>…</svg> after marker in page.
func svgAfter(t *testing.T, page, marker string) string {
	t.Helper()
	i := strings.Index(page, marker)
	if i < 0 {
		t.Fatalf("no %q", marker)
	}
	rest := page[i:]
	start, end := strings.Index(rest, "<svg"), strings.Index(rest, "</svg>")
	if start < 0 || end < start {
		t.Fatalf("no svg after %q", marker)
	}
	return rest[start : end+len("</svg>")]
}

func TestReportNotDeployed(t *testing.T) {
	res, plan, fetch := retrainRun(t)
	res.Status, res.Error = runs.StatusFailed, "node gate: gate rejected: auc 0.53 < 0.76"
	g, d := res.Node("gate"), res.Node("deploy")
	g.Status, g.Outputs, g.Error = runs.NodeFailed, nil, "gate rejected: auc 0.53 < 0.76 <b>"
	d.Status, d.Outputs, d.Reason = runs.NodeCancelled, nil, "not started: the run failed"
	var b strings.Builder
	// No Web UI and no stats copies: the run id and the URI show as text.
	if err := Write(&b, Collect(context.Background(), fetch, res, plan), Options{}); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{
		`class="banner notdeployed"><b>Not deployed</b>the gate rejected the candidate`,
		"Gate: rejected (run failed).</b> gate rejected: auc 0.53 &lt; 0.76 &lt;b&gt;",
		"ctr-retrain/2026-11-20 (no Web UI address given)", "<code>s3://b/runs/stats_user.html</code>",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(page, "Deployed ctr") || strings.Contains(page, "retrain model show") {
		t.Error("a run that deployed nothing shows a deployment")
	}
}

// A deploy undone by its compensation is not shown as deployed.
func TestReportRolledBack(t *testing.T) {
	res, _, _ := retrainRun(t)
	res.Status = runs.StatusFailed
	res.Compensations = []runs.NodeState{{ID: "undeploy", Type: "rollback_model", Status: runs.NodeSucceeded, Compensates: "deploy"}}
	views := deployments(res)
	if len(views) != 1 || views[0].Deployed || !strings.Contains(views[0].Text, "then rolled back") || !strings.Contains(views[0].Detail, "undeploy undid it") {
		t.Errorf("deployments %+v", views)
	}
}

func TestDAGWrapsAndFits(t *testing.T) {
	// A chain of 12 nodes is wider than the page: it wraps into bands.
	var nodes []runs.NodeState
	plan := &dags.Plan{}
	for i := range 12 {
		id := fmt.Sprintf("step_%02d", i)
		nodes = append(nodes, runs.NodeState{ID: id, Type: "feature_stats", Status: runs.NodeSucceeded})
		pn := dags.PlanNode{ID: id}
		if i > 0 {
			pn.Needs = []string{fmt.Sprintf("step_%02d", i-1)}
		}
		plan.Nodes = append(plan.Nodes, pn)
	}
	svg := string(dagSVG(nodes, plan.Edges()))
	var w, h float64
	if _, err := fmt.Sscanf(svg, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g"`, &w, &h); err != nil {
		t.Fatalf("%v: %.120s", err, svg)
	}
	if w > dagMaxWidth || h < 2*40 {
		t.Errorf("DAG %gx%g: want at most %d wide, wrapped into bands", w, h, dagMaxWidth)
	}
	if !strings.Contains(svg, "<polyline") {
		t.Error("no edge runs between bands")
	}
	// Labels fit their boxes by the same estimate that sized them.
	if got := fitText("a_node_with_a_really_long_identifier", 120, 12, true); textWidth(got, 12, true) > 120 || !strings.HasSuffix(got, "…") {
		t.Errorf("fitText = %q (%.0f px)", got, textWidth(got, 12, true))
	}
	if got := fitText("train", 120, 12, true); got != "train" {
		t.Errorf("fitText cut a short label: %q", got)
	}
}

func TestDateList(t *testing.T) {
	for _, tc := range []struct {
		dates []string
		want  string
	}{
		{nil, "none"},
		{[]string{"2026-11-04"}, "2026-11-04"},
		{[]string{"2026-10-30", "2026-10-31", "2026-11-01"}, "2026-10-30 .. 2026-11-01 (3 days)"},
		{[]string{"2026-11-01", "2026-11-03"}, "2026-11-01, 2026-11-03"},
		{[]string{"2026-11-01", "2026-11-03", "2026-11-05", "2026-11-07", "2026-11-09", "2026-11-11", "2026-11-13"},
			"2026-11-01, 2026-11-03, … 2026-11-11, 2026-11-13 (7 dates)"},
	} {
		if got := dateList(tc.dates); got != tc.want {
			t.Errorf("dateList(%v) = %q, want %q", tc.dates, got, tc.want)
		}
	}
}

// TestParamsWrap: a run's params print as name=value pairs with spaces,
// which wrap inside the page, not as one unbreakable JSON word.
func TestParamsWrap(t *testing.T) {
	res := &runs.Result{ID: "r", Pipeline: "p", Status: runs.StatusSucceeded,
		Params: map[string]any{"python": "/usr/bin/python3", "epochs": 2.0, "model": "ctr"}}
	var buf bytes.Buffer
	if err := Write(&buf, Collect(context.Background(), nil, res, nil), Options{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `epochs=2, model=&#34;ctr&#34;, python=&#34;/usr/bin/python3&#34;`) {
		t.Errorf("params not as spaced pairs in:\n%s", buf.String())
	}
}
