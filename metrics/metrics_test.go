package metrics

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
)

// TestScrapePadsLabelSets records one metric name under two tag sets, as
// the SDK does, and checks the scrape parses and carries both series.
func TestScrapePadsLabelSets(t *testing.T) {
	reg := NewRegistry(map[string]string{"jobs_total": "Jobs."})
	h := reg.Handler().WithTags(map[string]string{"namespace": "default"})
	h.Counter("jobs_total").Inc(2)
	h.WithTags(map[string]string{"task_queue": "q"}).Counter("jobs_total").Inc(3)
	h.WithTags(map[string]string{"node_type": "command"}).Timer("step").Record(1500 * time.Millisecond)
	h.Gauge("slots").Update(7)
	h.Gauge("jobs_total").Update(1) // another kind under a counter's name: dropped, not a broken scrape

	body := scrape(t, reg)
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("scrape does not parse: %v\n%s", err, body)
	}
	jobs := fams["jobs_total"]
	if jobs == nil || len(jobs.Metric) != 2 || jobs.GetHelp() != "Jobs." {
		t.Fatalf("jobs_total = %v", jobs)
	}
	var sum float64
	for _, m := range jobs.Metric {
		sum += m.GetCounter().GetValue()
		if len(m.Label) != 2 {
			t.Errorf("jobs_total labels %v, want namespace and task_queue on every series", m.Label)
		}
	}
	if sum != 5 {
		t.Errorf("jobs_total sums to %v, want 5", sum)
	}
	step := fams["step_seconds"]
	if step == nil || step.Metric[0].GetHistogram().GetSampleCount() != 1 || step.Metric[0].GetHistogram().GetSampleSum() != 1.5 {
		t.Fatalf("step_seconds = %v", step)
	}
	for _, b := range step.Metric[0].GetHistogram().Bucket {
		want := uint64(0)
		if b.GetUpperBound() >= 1.5 {
			want = 1
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
	if g := fams["slots"]; g == nil || g.Metric[0].GetGauge().GetValue() != 7 {
		t.Errorf("slots = %v", g)
	}
	if fams["go_goroutines"] == nil {
		t.Error("no Go runtime metrics")
	}
}

func TestSanitize(t *testing.T) {
	for in, want := range map[string]string{"temporal_request": "temporal_request", "a.b-c": "a_b_c", "9x": "_x"} {
		if got := sanitize(in); got != want {
			t.Errorf("sanitize(%q) = %q, want %q", in, got, want)
		}
	}
}

// scrape serves reg on a free loopback port and returns one scrape's body.
func scrape(t *testing.T, reg *Registry) []byte {
	t.Helper()
	srv, err := Listen("127.0.0.1:0", reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	resp, err := http.Get("http://" + srv.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return body
}
