package report

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/activities/evaluate"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/internal/gate"
	"github.com/retrain-ml/retrain/internal/trainer"
	"github.com/retrain-ml/retrain/runs"
)

// experimentRun is a feature experiment's run, as
// dags/examples/feature-experiment.yaml makes it: two evaluate nodes
// score the candidate and the control on the same rows, sliced by date;
// the gate compares their figures. The control's evaluation lacks the
// slice 2026-11-04 (as when max_slices cuts the two lists differently).
func experimentRun(t *testing.T) (*runs.Result, *dags.Plan, map[string]any) {
	t.Helper()
	labels := []float32{0, 0, 1, 0, 1, 0, 1, 1}
	model := func(preds []float64, overall map[string]gate.Number, sl map[string]map[string]gate.Number) evaluate.ModelMetrics {
		return evaluate.ModelMetrics{Overall: overall, Slices: sl, ROC: trainer.ROC(preds, labels, trainer.DefaultROCPoints),
			CalibrationBins: trainer.CalibrationBins(preds, labels, trainer.DefaultCalibrationBins)}
	}
	report := func(m evaluate.ModelMetrics) evaluate.EvaluationReport {
		return evaluate.EvaluationReport{Data: "s3://b/split", Dataset: "eval", Rows: 15000, Dates: []string{"2026-11-03", "2026-11-04"},
			SliceColumn: "date", Candidate: m}
	}
	objects := map[string]any{
		"s3://b/cand.json": report(model([]float64{0.05, 0.1, 0.12, 0.3, 0.35, 0.5, 0.7, 0.9},
			map[string]gate.Number{"auc": 0.75, "log_loss": 0.40, "accuracy": 0.81, "count": 15000},
			map[string]map[string]gate.Number{
				"2026-11-03": {"auc": 0.76, "log_loss": 0.39, "count": 7600},
				"2026-11-04": {"auc": 0.74, "log_loss": 0.41, "count": 7400},
			})),
		"s3://b/ctrl.json": report(model([]float64{0.2, 0.1, 0.3, 0.3, 0.3, 0.6, 0.4, 0.5},
			map[string]gate.Number{"auc": 0.70, "log_loss": 0.50, "accuracy": 0.80, "count": 15000},
			map[string]map[string]gate.Number{
				"2026-11-03": {"auc": 0.71, "log_loss": 0.48, "count": 7600},
			})),
	}
	num := func(f float64) *gate.Number { n := gate.Number(f); return &n }
	res := &runs.Result{ID: "feature-experiment-1", Pipeline: "feature-experiment", Status: runs.StatusSucceeded, Nodes: []runs.NodeState{
		{ID: "evaluate_candidate", Type: "evaluate", Status: runs.NodeSucceeded, Outputs: map[string]any{"metrics_uri": "s3://b/cand.json"}},
		{ID: "evaluate_control", Type: "evaluate", Status: runs.NodeSucceeded, Outputs: map[string]any{"metrics_uri": "s3://b/ctrl.json"}},
		{ID: "gate", Type: "gate", Status: runs.NodeSucceeded, Outputs: map[string]any{
			"passed": true, "has_baseline": true, "baseline_version": "control", "baseline_source": "given",
			"comparisons": []gate.Comparison{
				{Metric: "auc", Check: gate.CheckMinAbsoluteChange, Direction: gate.HigherIsBetter, Candidate: num(0.75), Baseline: num(0.70),
					Threshold: 0.002, Passed: true},
				{Metric: "log_loss", Check: gate.CheckMinRelativeChange, Direction: gate.LowerIsBetter, Candidate: num(0.40), Baseline: num(0.50),
					Threshold: 0, Passed: true},
			}}},
	}}
	// Outputs come back from history as generic JSON.
	b, _ := json.Marshal(res.Nodes[2].Outputs)
	res.Nodes[2].Outputs = nil
	if err := json.Unmarshal(b, &res.Nodes[2].Outputs); err != nil {
		t.Fatal(err)
	}
	plan := &dags.Plan{Nodes: []dags.PlanNode{
		{ID: "evaluate_candidate"}, {ID: "evaluate_control"},
		{ID: "gate", Needs: []string{"evaluate_candidate", "evaluate_control"}, With: map[string]any{
			"candidate":      "${nodes.evaluate_candidate.outputs.candidate}",
			"baseline":       "${nodes.evaluate_control.outputs.candidate}",
			"candidate_data": map[string]any{"rows": "${nodes.evaluate_candidate.outputs.rows}"},
		}},
	}}
	return res, plan, objects
}

func fetchFrom(objects map[string]any) Fetcher {
	return FetchFunc(func(_ context.Context, uri string) ([]byte, error) {
		v, ok := objects[uri]
		if !ok {
			return nil, errors.New("not found")
		}
		return json.Marshal(v)
	})
}

func near(p *float64, want float64) bool { return p != nil && math.Abs(*p-want) < 1e-9 }

// TestLiftTable: the lift of each gated metric is candidate - control,
// absolute and relative, with the threshold; per slice likewise; a slice
// only one evaluation has gets no lift.
func TestLiftTable(t *testing.T) {
	res, plan, objects := experimentRun(t)
	for _, withPlan := range []bool{true, false} {
		p := plan
		if !withPlan {
			p = nil // without the plan, the figures tell the evaluations apart
		}
		l := Collect(context.Background(), fetchFrom(objects), res, p).Lifts["gate"]
		if l == nil || l.Candidate == nil || l.Baseline == nil || l.Candidate.Node != "evaluate_candidate" || l.Baseline.Node != "evaluate_control" ||
			l.Candidate.Baseline || l.Baseline.Baseline || l.BaselineName != "control" {
			t.Fatalf("plan %v: lift %+v", withPlan, l)
		}
		if len(l.Metrics) != 3 {
			t.Fatalf("metrics %+v, want auc, log_loss and the ungated accuracy", l.Metrics)
		}
		auc, ll, acc := l.Metrics[0], l.Metrics[1], l.Metrics[2]
		if auc.Metric != "auc" || !near(auc.Lift, 0.05) || !near(auc.Relative, 0.05/0.70) || auc.Threshold != 0.002 || !auc.Passed {
			t.Errorf("auc %+v", auc)
		}
		if ll.Metric != "log_loss" || !near(ll.Lift, -0.10) || !near(ll.Relative, -0.2) {
			t.Errorf("log_loss %+v", ll)
		}
		if acc.Metric != "accuracy" || acc.Check != "" || !near(acc.Lift, 0.01) {
			t.Errorf("accuracy %+v", acc)
		}
		if l.SliceColumn != "date" || strings.Join(l.SliceMetrics, ",") != "auc,log_loss" || len(l.Slices) != 2 {
			t.Fatalf("slices %q %v %+v", l.SliceColumn, l.SliceMetrics, l.Slices)
		}
		s3, s4 := l.Slices[0], l.Slices[1]
		if s3.Slice != "2026-11-03" || s3.Missing != "" || !near(s3.Metrics["auc"].Lift, 0.05) || !near(s3.Metrics["log_loss"].Lift, -0.09) ||
			!near(s3.CandidateRows, 7600) {
			t.Errorf("slice 2026-11-03 %+v", s3)
		}
		if s4.Slice != "2026-11-04" || s4.Missing != "control" || s4.Metrics["auc"].Lift != nil || !near(s4.Metrics["auc"].Candidate, 0.74) ||
			s4.Metrics["auc"].Baseline != nil || !strings.Contains(l.SlicesNote, "one evaluation only") {
			t.Errorf("slice 2026-11-04 %+v, note %q", s4, l.SlicesNote)
		}
	}
}

// TestLiftPage: the gate's section shows the lift tables and one ROC
// plot with both curves, each in the legend with its AUC; the two
// evaluate nodes' own sections, which would repeat it, are left out.
func TestLiftPage(t *testing.T) {
	res, plan, objects := experimentRun(t)
	var b strings.Builder
	if err := Write(&b, Collect(context.Background(), fetchFrom(objects), res, plan), Options{}); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{
		"Lift per metric", "<th>lift (candidate − control)</th>",
		// html/template writes "+" as "&#43;".
		`<td class="num better">&#43;0.0500</td><td class="num better">&#43;7.14%</td><td class="num">lift ≥ &#43;0.0020</td><td>pass</td>`,
		`<td class="num better">-0.1000</td><td class="num better">-20.00%</td><td class="num">relative lift ≤ 0</td>`,
		`<tr class="ungated"><td>accuracy</td>`,
		"Lift per slice (date)", `<th colspan="3">auc</th>`,
		`<td>2026-11-04 <span class="note">(not in the control&#39;s evaluation)</span></td><td class="num">7400</td><td class="num">0.7400</td><td class="num">–</td><td class="num ">–</td>`,
		"both scored on the same 15000 held-out rows of 2026-11-03 .. 2026-11-04 (2 days)",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	roc := svgAfter(t, page, "ROC curves: candidate and control")
	if n := strings.Count(roc, "<polyline"); n != 2 {
		t.Errorf("ROC plot has %d curves, want 2", n)
	}
	for _, want := range []string{`stroke="` + candidateColor + `"`, `stroke="` + baselineColor + `"`, "candidate (AUC 0.7500)", "control (AUC 0.7000)"} {
		if !strings.Contains(roc, want) {
			t.Errorf("ROC plot lacks %q", want)
		}
	}
	if strings.Contains(page, "Candidate vs baseline") {
		t.Error("the evaluate nodes' sections repeat the lift")
	}
}

// TestLiftRegistryBaseline: a gate whose baseline's figures are the
// registry's record has no slices to compare: the page says so, and the
// candidate's evaluation keeps its own section.
func TestLiftRegistryBaseline(t *testing.T) {
	res, plan, objects := experimentRun(t)
	g := res.Node("gate")
	g.Outputs["baseline_source"], g.Outputs["baseline_version"] = "registry ctr@v3", "v3"
	plan.Nodes[2].With["baseline"] = map[string]any{"model": "ctr", "alias": "production"}
	r := Collect(context.Background(), fetchFrom(objects), res, plan)
	l := r.Lifts["gate"]
	if l.Candidate == nil || l.Baseline != nil || len(l.Slices) != 0 || !strings.Contains(l.SlicesNote, "not available") ||
		!near(l.Metrics[0].Lift, 0.05) || len(l.Metrics) != 2 {
		t.Fatalf("lift %+v", l)
	}
	var b strings.Builder
	if err := Write(&b, r, Options{}); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{"<th>baseline v3</th>", "Per-slice lift is not available", "Candidate vs baseline: evaluate_candidate"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

// TestLiftOneEvaluation: a gate fed one evaluate node's evaluation (a
// candidate and production scored together) takes both sides from it.
func TestLiftOneEvaluation(t *testing.T) {
	res, plan, objects := experimentRun(t)
	cand := objects["s3://b/cand.json"].(evaluate.EvaluationReport)
	ctrl := objects["s3://b/ctrl.json"].(evaluate.EvaluationReport).Candidate
	cand.Baseline, cand.BaselineVersion = &ctrl, "v2"
	objects["s3://b/cand.json"] = cand
	res.Nodes = append(res.Nodes[:1], res.Nodes[2])
	g := res.Node("gate")
	g.Outputs["baseline_source"], g.Outputs["baseline_version"] = "evaluation", "v2"
	plan.Nodes[2].With = map[string]any{"evaluation": "${nodes.evaluate_candidate.outputs.evaluation}"}
	l := Collect(context.Background(), fetchFrom(objects), res, plan).Lifts["gate"]
	if l.Candidate == nil || l.Baseline == nil || l.Candidate.Baseline || !l.Baseline.Baseline || l.BaselineName != "baseline v2" ||
		len(l.Slices) != 2 || !near(l.Slices[0].Metrics["auc"].Lift, 0.05) {
		t.Fatalf("lift %+v", l)
	}
}

// A lift that rounds to nothing reads as none, not as a signed zero.
func TestSignedFig(t *testing.T) {
	for _, tc := range []struct {
		f    float64
		want string
	}{{-0.00001, "0.0000"}, {0.00004, "0.0000"}, {0, "0.0000"}, {0.00006, "+0.0001"}, {-0.0477, "-0.0477"}} {
		if got := signedFig(tc.f, 4); got != tc.want {
			t.Errorf("signedFig(%g) = %q, want %q", tc.f, got, tc.want)
		}
	}
	if c := liftClass(ptr(-0.00001), "lower_is_better"); c != "" {
		t.Errorf("a lift shown as 0.0000 coloured %q", c)
	}
}

// TestGateVerdictNamesSkipped: a rejected gate's verdict names the nodes
// its verdict held back (a feature experiment's promotion, a deploy), not
// a deploy the pipeline may not have.
func TestGateVerdictNamesSkipped(t *testing.T) {
	nodes := []runs.NodeState{
		{ID: "gate", Type: "gate", Status: runs.NodeSucceeded, Outputs: map[string]any{"passed": false}},
		{ID: "promote", Type: "promote_features", Status: runs.NodeSkipped, Reason: `when "${nodes.gate.outputs.passed} && ${params.promote}" is false`},
		{ID: "notify", Type: "command", Status: runs.NodeSkipped, Reason: `when "${params.notify}" is false`},
		{ID: "gate2", Type: "gate", Status: runs.NodeSucceeded, Outputs: map[string]any{"passed": false}},
	}
	if got := gateRows(nodes[0], nil, skippedBy(nodes, "gate")).Verdict; got != "rejected (skipped: promote)" {
		t.Errorf("verdict %q", got)
	}
	if got := gateRows(nodes[3], nil, skippedBy(nodes, "gate2")).Verdict; got != "rejected" {
		t.Errorf("a gate nothing reads: verdict %q", got)
	}
}
