package worker

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/retrain-ml/retrain/nodetype"
	"github.com/retrain-ml/retrain/runs"
)

// metricRef finds metric names in PromQL.
var metricRef = regexp.MustCompile(`\b(?:retrain|temporal)_[a-z_]+\b`)

// sdkMetrics are the Temporal SDK metrics the shipped dashboard and alert
// rules use (timers with _seconds, as package metrics exports them); the
// integration test checks each appears in a real scrape.
var sdkMetrics = []string{
	"temporal_activity_schedule_to_start_latency_seconds",
	"temporal_worker_task_slots_available",
	"temporal_workflow_failed",
	"temporal_activity_execution_failed",
}

// DocMetrics returns the metric names (histogram series reduced to the
// histogram's name) that docs/grafana/retrain.json and docs/alerts.yaml use.
func docMetrics(t *testing.T) []string {
	t.Helper()
	var exprs []string
	raw, err := os.ReadFile("../docs/grafana/retrain.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			exprs = append(exprs, q.Expr)
		}
	}
	raw, err = os.ReadFile("../docs/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatalf("alerts: %v", err)
	}
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			exprs = append(exprs, r.Expr)
		}
	}
	for _, want := range []string{"RetrainRunFailed", "RetrainGateRejected", "RetrainGPUIdleWhileTraining"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("alerts.yaml has no %s", want)
		}
	}
	var names []string
	for _, e := range exprs {
		for _, m := range metricRef.FindAllString(e, -1) {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if strings.HasSuffix(m, "_seconds"+suffix) {
					m = strings.TrimSuffix(m, suffix)
				}
			}
			if !slices.Contains(names, m) {
				names = append(names, m)
			}
		}
	}
	return names
}

// TestDocsUseExportedMetrics keeps the dashboard and alert rules in step
// with the metric names the worker exports.
func TestDocsUseExportedMetrics(t *testing.T) {
	exported := append(ExportedMetrics(), sdkMetrics...)
	names := docMetrics(t)
	if len(names) < 5 {
		t.Fatalf("docs use only %v", names)
	}
	for _, n := range names {
		if !slices.Contains(exported, n) {
			t.Errorf("docs use %s, which the worker does not export", n)
		}
	}
}

func TestGateDecision(t *testing.T) {
	for _, c := range []struct {
		outputs map[string]any
		want    string
	}{
		{map[string]any{"passed": true, "forced": false}, "passed"},
		{map[string]any{"passed": false, "forced": false}, "rejected"},
		{map[string]any{"passed": true, "forced": true}, "approved"},
		{map[string]any{"passed": false, "forced": true}, "approved"},
	} {
		if got := gateDecision(nodetypeResult(c.outputs)); got != c.want {
			t.Errorf("%v: %q, want %q", c.outputs, got, c.want)
		}
	}
	if got := gateDecision(nil); got != "" {
		t.Errorf("nil result: %q", got)
	}
}

func nodetypeResult(outputs map[string]any) nodetype.Result { return nodetype.Result{Outputs: outputs} }

func TestScheduledVerdict(t *testing.T) {
	gate := func(status runs.NodeStatus, passed any) *runs.Result {
		return &runs.Result{Nodes: []runs.NodeState{{ID: "train", Type: "command", Status: runs.NodeSucceeded},
			{ID: "gate", Type: "gate", Status: status, Outputs: map[string]any{"passed": passed}}}}
	}
	for _, c := range []struct {
		res  any
		want string
	}{
		{gate(runs.NodeSucceeded, false), "rejected"},
		{gate(runs.NodeSucceeded, true), "passed"},
		{gate(runs.NodeFailed, nil), "undecided"},
		{&runs.Result{}, "undecided"}, // no gate
		{nil, "undecided"},
	} {
		if got := scheduledVerdict(c.res); got != c.want {
			t.Errorf("%+v: %q, want %q", c.res, got, c.want)
		}
	}
}
