package canary

import (
	"math"
	"strings"
	"testing"
)

func f(v float64) *float64 { return &v }

func check(t *testing.T, m map[string]any) Check {
	t.Helper()
	m["name"], m["query"] = "c", "q"
	cs, err := ParseChecks([]any{m}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return cs[0]
}

func TestJudge(t *testing.T) {
	errRate := check(t, map[string]any{"max": 0.01})
	ctr := check(t, map[string]any{"direction": "higher_is_better", "min_relative_change": -0.02, "count_query": "n", "min_count": 1000.0})
	p99 := check(t, map[string]any{"direction": "lower_is_better", "min_relative_change": -0.1})
	lenient := check(t, map[string]any{"max": 1.0, "on_no_data": "ignore"})
	for _, tc := range []struct {
		name   string
		c      Check
		s      Sample
		status Status
		reason string
	}{
		{"under max", errRate, Sample{Canary: f(0.005)}, Pass, ""},
		{"over max", errRate, Sample{Canary: f(0.02)}, Breach, "above max 0.01"},
		{"no data fails closed", errRate, Sample{}, Breach, "no data for the canary"},
		{"NaN is no data", errRate, Sample{Canary: f(math.NaN())}, Breach, "value NaN"},
		{"ignored no data waits", lenient, Sample{}, Waiting, "on_no_data: ignore"},
		{"ctr within 2%", ctr, Sample{Canary: f(0.099), Production: f(0.1), Count: f(5000)}, Pass, ""},
		{"ctr drop of 10%", ctr, Sample{Canary: f(0.09), Production: f(0.1), Count: f(5000)}, Breach, ""},
		{"ctr too few events", ctr, Sample{Canary: f(0.01), Production: f(0.1), Count: f(10)}, Waiting, "min_count"},
		{"ctr no production data", ctr, Sample{Canary: f(0.1), Count: f(5000)}, Breach, "for the production"},
		{"latency up 5% allowed", p99, Sample{Canary: f(0.105), Production: f(0.1)}, Pass, ""},
		{"latency up 50%", p99, Sample{Canary: f(0.15), Production: f(0.1)}, Breach, ""},
	} {
		j := Judge(tc.c, tc.s)
		if j.Status != tc.status || !strings.Contains(j.Reason, tc.reason) {
			t.Errorf("%s: %+v, want %s with %q", tc.name, j, tc.status, tc.reason)
		}
	}
}

func TestStepEnd(t *testing.T) {
	c := check(t, map[string]any{"max": 1.0, "min_samples": 2.0})
	var one Tally
	one.Add(Judgement{Status: Pass, Reason: "ok"})
	if j := StepEnd(c, one); j.Status != Breach || !strings.Contains(j.Reason, "min_samples 2") {
		t.Errorf("one passing sample of 2: %+v", j)
	}
	one.Add(Judgement{Status: Pass, Reason: "ok"})
	if j := StepEnd(c, one); j.Status != Pass {
		t.Errorf("two passing samples: %+v", j)
	}
	one.Add(Judgement{Status: Waiting, Reason: "5 events of min_count 10"})
	if j := StepEnd(c, one); j.Status != Breach || !strings.Contains(j.Reason, "not enough data") {
		t.Errorf("last sample waiting: %+v", j)
	}
	if j := StepEnd(c, Tally{}); j.Status != Breach {
		t.Errorf("no samples: %+v", j)
	}
}
