package canary

import (
	"strings"
	"testing"
	"time"
)

func TestParseWarmupAndFailureLimit(t *testing.T) {
	steps := []any{
		map[string]any{"percent": 10.0, "bake": "1m", "warmup": "20s"},
		map[string]any{"percent": 50.0, "bake": "2m"},
		map[string]any{"percent": 100.0},
	}
	checks := []any{
		map[string]any{"name": "a", "query": "q", "max": 1.0},
		map[string]any{"name": "b", "query": "q", "max": 1.0, "failure_limit": 4.0},
	}
	s, err := ParseSpec(steps, checks, Settings{PrometheusURL: "http://p:9090", Warmup: "30s", FailureLimit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if s.Steps[0].Warmup != 20*time.Second || s.Steps[1].Warmup != 30*time.Second {
		t.Errorf("warmups %v, %v: want the step's own 20s, then the node's 30s", s.Steps[0].Warmup, s.Steps[1].Warmup)
	}
	if s.Checks[0].FailureLimit != 3 || s.Checks[1].FailureLimit != 4 {
		t.Errorf("failure limits %d, %d: want the node's 3, then the check's own 4", s.Checks[0].FailureLimit, s.Checks[1].FailureLimit)
	}
	if s.InconclusiveTimeout != DefaultInconclusiveTimeout {
		t.Errorf("inconclusive timeout %v", s.InconclusiveTimeout)
	}
	// A node warmup longer than a step that sets its own is fine there.
	if _, err := ParseSpec(steps, checks, Settings{PrometheusURL: "http://p:9090", Warmup: "90s"}); err != nil {
		t.Errorf("node warmup 90s with step 0's own 20s: %v", err)
	}
	d, err := ParseSpec(steps, checks[:1], Settings{PrometheusURL: "http://p:9090"})
	if err != nil || d.Checks[0].FailureLimit != DefaultFailureLimit {
		t.Fatalf("default failure limit: %+v, %v", d.Checks, err)
	}
	for _, tc := range []struct {
		steps, checks []any
		set           Settings
		want          string
	}{
		{[]any{map[string]any{"percent": 10.0, "bake": "10s", "warmup": "20s"}, map[string]any{"percent": 100.0}}, checks, Settings{}, "steps[0].warmup: 20s is longer than the step's bake 10s"},
		{steps, checks, Settings{Warmup: "3m"}, "steps[1].warmup: 3m0s is longer than the step's bake 2m0s"},
		{steps, checks, Settings{FailureLimit: -1}, "failure_limit"},
		{steps, []any{map[string]any{"name": "a", "query": "q", "max": 1.0, "failure_limit": 0.0}}, Settings{}, "checks[0]: failure_limit: want a whole number from 1"},
		{steps, []any{map[string]any{"name": "a", "query": "q", "max": 1.0, "failure_limit": 1.5}}, Settings{}, "failure_limit"},
		{steps, checks, Settings{InconclusiveTimeout: "0s"}, "inconclusive_timeout"},
	} {
		tc.set.PrometheusURL = "http://p:9090"
		_, err := ParseSpec(tc.steps, tc.checks, tc.set)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseSpec(%+v) = %v, want an error with %q", tc.set, err, tc.want)
		}
	}
}

// TestCountFailureLimit: one breach among passes does not breach a check
// with failure_limit 2; two in a row do, and the streak names them.
func TestCountFailureLimit(t *testing.T) {
	c := check(t, map[string]any{"max": 1.0, "failure_limit": 2.0})
	pass, breach := Judge(c, Sample{Canary: f(0.5)}), Judge(c, Sample{Canary: f(2)})
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * 2 * time.Second) }
	var one Tally
	for i, j := range []Judgement{pass, breach, pass, pass} {
		one.Count(j, at(i), c.Limit())
	}
	if v := Verdict(c, one); v.Status != Pass || one.Breached || !strings.Contains(v.Reason, "4 evaluations: 3 passed, 1 breached, 0 inconclusive; failure_limit 2") {
		t.Errorf("one breach among passes: %+v, %+v", v, one)
	}
	var two Tally
	for i, j := range []Judgement{pass, breach, breach} {
		two.Count(j, at(i), c.Limit())
	}
	if v := Verdict(c, two); v.Status != Breach || !two.Breached || len(two.Streak) != 2 || !two.Streak[0].Equal(at(1)) {
		t.Errorf("two breaches in a row: %+v, %+v", v, two)
	}
	// A streak goes on into the next step; an inconclusive evaluation
	// neither ends nor extends it.
	var carry Tally
	carry.Count(breach, at(0), 2)
	next := carry.Next()
	next.Count(Judgement{Status: Waiting, Reason: "few events"}, at(1), 2)
	if next.Breached {
		t.Fatal("an inconclusive evaluation extended the streak")
	}
	next.Count(breach, at(2), 2)
	if !next.Breached || len(next.Streak) != 2 {
		t.Errorf("breach, (next step) inconclusive, breach: %+v", next)
	}
	// Recorded plans have no limit: 0 is 1, the first breach rolls back.
	var legacy Tally
	legacy.Count(breach, at(0), Check{}.Limit())
	if !legacy.Breached {
		t.Error("failure limit 0 did not breach at the first breach")
	}
}

// TestGraceExcusesNoData: no data in a step's warmup or first
// min_samples evaluations is inconclusive; after them it is a breach; a
// value's breach is never excused.
func TestGraceExcusesNoData(t *testing.T) {
	c := check(t, map[string]any{"max": 1.0, "min_samples": 2.0})
	step := Step{Percent: 10, Bake: time.Minute, Warmup: 10 * time.Second}
	none := Judge(c, Sample{})
	if none.Status != Breach || !none.NoData {
		t.Fatalf("no data: %+v", none)
	}
	for _, tc := range []struct {
		since     time.Duration
		evaluated int
		status    Status
		why       string
	}{
		{2 * time.Second, 5, Waiting, "warmup of 10s"},
		{12 * time.Second, 0, Waiting, "first min_samples 2"},
		{12 * time.Second, 1, Waiting, "first min_samples 2"},
		{12 * time.Second, 2, Breach, ""},
	} {
		why := Grace(c, step, tc.since, tc.evaluated)
		j := Excuse(none, why)
		if j.Status != tc.status || !strings.Contains(why, tc.why) {
			t.Errorf("at %v, evaluation %d: %+v (%q), want %s", tc.since, tc.evaluated, j, why, tc.status)
		}
	}
	if j := Excuse(Judge(c, Sample{Canary: f(5)}), "within the step's warmup"); j.Status != Breach {
		t.Errorf("a breach on data was excused: %+v", j)
	}
}

// TestVerdictInconclusive: a step whose check saw no passing evaluation
// (all inconclusive) is inconclusive, not passed or breached.
func TestVerdictInconclusive(t *testing.T) {
	c := check(t, map[string]any{"max": 1.0})
	var tl Tally
	tl.Count(Judgement{Status: Waiting, Reason: "3 events of min_count 10"}, time.Now(), c.Limit())
	if v := Verdict(c, tl); v.Status != Inconclusive || !strings.Contains(v.Reason, "0 passing evaluations of min_samples 1") {
		t.Errorf("%+v", v)
	}
}
