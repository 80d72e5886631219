package integration

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/retrain-ml/retrain/dags/examples"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/worker"
)

// TestMetricsAfterRun starts a worker serving metrics on a free port, runs
// the outputs example (command nodes and a gate) and scrapes /metrics:
// retrain's counters and the SDK's own must have moved.
func TestMetricsAfterRun(t *testing.T) {
	queue := newQueue(t)
	w, err := worker.New(t.Context(), tclient, server.Namespace(), worker.Config{
		TaskQueue: queue, Pipelines: examples.FS, MetricsAddr: "127.0.0.1:0",
	}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	addr := w.MetricsAddr()
	if addr == "" {
		t.Fatal("worker serves no metrics")
	}

	res := runRequest(t, runs.Request{Pipeline: "outputs", TaskQueue: queue}, 2*time.Minute)
	wantStatus(t, res, runs.StatusSucceeded)

	// The workflow's completion is counted as its last task completes,
	// which may land a moment after the client saw the result.
	var fams map[string]*dto.MetricFamily
	var text string
	waitFor(t, 15*time.Second, func() bool {
		fams, text = scrape(t, "http://"+addr+"/metrics")
		return sum(fams, "retrain_runs_total", map[string]string{"pipeline": "outputs", "status": "succeeded", "task_queue": queue}) >= 1
	})
	commands := histCount(fams, "retrain_node_duration_seconds", map[string]string{"node_type": "command", "status": "ok", "task_queue": queue})
	if commands < 4 {
		t.Errorf("retrain_node_duration_seconds count for command nodes = %d, want >= 4", commands)
	}
	if n := sum(fams, "retrain_node_attempts_total", map[string]string{"node_type": "command", "task_queue": queue}); n < 4 {
		t.Errorf("retrain_node_attempts_total for command = %v, want >= 4", n)
	}
	// The gate runs as a child workflow: its attempts are counted from it.
	if n := histCount(fams, "retrain_node_duration_seconds", map[string]string{"node_type": "gate", "status": "ok", "task_queue": queue}); n < 1 {
		t.Errorf("retrain_node_duration_seconds count for the gate (a child workflow node) = %d, want >= 1", n)
	}
	if n := sum(fams, "retrain_gate_decisions_total", map[string]string{"decision": "passed"}); n < 1 {
		t.Errorf("retrain_gate_decisions_total{decision=passed} = %v, want >= 1", n)
	}
	// The SDK's own metrics, by type.
	if n := sum(fams, "temporal_workflow_completed", map[string]string{"workflow_type": runs.PipelineWorkflow, "task_queue": queue}); n < 1 {
		t.Errorf("temporal_workflow_completed{workflow_type=%s} = %v, want >= 1", runs.PipelineWorkflow, n)
	}
	if n := histCount(fams, "temporal_activity_execution_latency_seconds", map[string]string{"task_queue": queue}); n < 4 {
		t.Errorf("temporal_activity_execution_latency_seconds count = %d, want >= 4", n)
	}
	// The metrics the dashboard and alert rules use that a CPU worker emits
	// on a successful run are in the scrape. Not here: the GPU gauges (a
	// GPU worker's), the SDK's failure counters (on failures only) and
	// temporal_activity_schedule_to_start_latency, which the SDK records
	// for polled activity tasks while this run's were dispatched eagerly.
	for _, name := range []string{
		"temporal_worker_task_slots_available",
		"retrain_runs_total", "retrain_node_attempts_total", "retrain_gate_decisions_total",
	} {
		if fams[name] == nil {
			t.Errorf("scrape has no %s", name)
		}
	}
	if t.Failed() || testing.Verbose() {
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, "retrain_") && strings.Contains(line, queue) && !strings.Contains(line, "_bucket") {
				t.Log(line)
			}
		}
	}
}

func scrape(t *testing.T, url string) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("scrape does not parse: %v", err)
	}
	return fams, string(body)
}

// matching returns the series of name whose labels include want.
func matching(fams map[string]*dto.MetricFamily, name string, want map[string]string) []*dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
	var out []*dto.Metric
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		out = append(out, m)
	}
	return out
}

func sum(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	var s float64
	for _, m := range matching(fams, name, want) {
		s += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return s
}

func histCount(fams map[string]*dto.MetricFamily, name string, want map[string]string) uint64 {
	var n uint64
	for _, m := range matching(fams, name, want) {
		n += m.GetHistogram().GetSampleCount()
	}
	return n
}
