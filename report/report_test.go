package report

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/activities"
	"github.com/retrain-ml/retrain/colstats"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/gate"
	"github.com/retrain-ml/retrain/workflows"
)

func TestReport(t *testing.T) {
	t0 := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	at := func(s float64) *time.Time { v := t0.Add(time.Duration(s * float64(time.Second))); return &v }
	res := &workflows.Result{
		ID: "ctr-retrain-1", Pipeline: "ctr-retrain", Status: workflows.StatusFailed, StartedAt: t0, EndedAt: at(9),
		Error: "node gate: gate rejected <candidate>",
		Nodes: []workflows.NodeState{
			{ID: "stats", Type: "feature_stats", Status: workflows.NodeSucceeded, Attempts: 1, StartedAt: at(0), EndedAt: at(1),
				Outputs: map[string]any{"report_uri": "s3://b/stats.json"}},
			{ID: "train", Type: "train", Status: workflows.NodeSucceeded, Attempts: 2, StartedAt: at(1), EndedAt: at(5),
				Outputs: map[string]any{"loss_curve_uri": "s3://b/curve.json", "steps": 3.0}},
			{ID: "evaluate", Type: "evaluate", Status: workflows.NodeSucceeded, Attempts: 1, StartedAt: at(5), EndedAt: at(6),
				Outputs: map[string]any{"metrics_uri": "s3://b/metrics.json"}},
			{ID: "gate", Type: "gate", Status: workflows.NodeFailed, Attempts: 1, StartedAt: at(6), EndedAt: at(6.1),
				Error: "gate rejected <script>alert(1)</script>"},
			{ID: "deploy", Type: "deploy", Status: workflows.NodeCancelled, Reason: "not started: the run failed"},
		},
		Compensations: []workflows.NodeState{{ID: "rollback_table", Type: "rollback_table", Status: workflows.NodeSucceeded,
			Compensates: "promote", StartedAt: at(7), EndedAt: at(7.2)}},
	}
	plan := &dags.Plan{Nodes: []dags.PlanNode{
		{ID: "stats"}, {ID: "train", Needs: []string{"stats"}}, {ID: "evaluate", Needs: []string{"train"}},
		{ID: "gate", Needs: []string{"evaluate"}}, {ID: "deploy", Needs: []string{"gate"}},
	}}
	mean := 0.5
	objects := map[string]any{
		"s3://b/stats.json": colstats.Report{Table: "ml.stage", Rows: 10, Columns: []colstats.Column{{Name: "ad_quality", Type: "double", Mean: &mean}}},
		"s3://b/curve.json": []activities.CurvePoint{{Step: 1, Loss: 0.7}, {Step: 2, Loss: 0.5}, {Step: 3, Loss: 0.45}},
		"s3://b/metrics.json": activities.EvaluationReport{Rows: 100, CandidateID: "sha256:c", BaselineVersion: "v2",
			Candidate: activities.ModelMetrics{Overall: map[string]gate.Number{"auc": 0.53, "log_loss": 14.6}},
			Baseline:  &activities.ModelMetrics{Overall: map[string]gate.Number{"auc": 0.77, "log_loss": 0.39}}},
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
	if err := Write(&b, r); err != nil {
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
	if err := Write(&b, r); err != nil {
		t.Fatal(err)
	}
}
