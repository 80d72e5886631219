package canary

import (
	"strings"
	"testing"
	"time"
)

func TestParseStepsRefusesBadSteps(t *testing.T) {
	step := func(p any, bake string) map[string]any {
		m := map[string]any{"percent": p}
		if bake != "" {
			m["bake"] = bake
		}
		return m
	}
	for _, tc := range []struct {
		steps []any
		want  string
	}{
		{[]any{step(5.0, "1m"), step(50.0, "")}, "must be 100"},
		{[]any{step(25.0, "1m"), step(5.0, "1m"), step(100.0, "")}, "does not increase"},
		{[]any{step(0.0, "1m"), step(100.0, "")}, "not in (0, 100]"},
		{[]any{step(150.0, "1m")}, "not in (0, 100]"},
		{[]any{step(5.0, "soon"), step(100.0, "")}, "steps[0].bake"},
		{[]any{step(5.0, ""), step(100.0, "")}, "no step bakes"},
		{[]any{map[string]any{"percent": 5.0, "weight": 3.0}}, `unknown key "weight"`},
		{nil, "want a list"},
	} {
		_, err := ParseSteps(tc.steps, 0)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseSteps(%v) = %v, want an error with %q", tc.steps, err, tc.want)
		}
	}
	steps, err := ParseSteps([]any{step(5.0, "30m"), step(25.0, "1h"), step(100.0, "")}, 0)
	if err != nil || len(steps) != 3 || steps[1].Bake != time.Hour || steps[2].Percent != 100 || steps[2].Bake != 0 {
		t.Fatalf("ParseSteps = %+v, %v", steps, err)
	}
}

func TestParseChecks(t *testing.T) {
	ok := map[string]any{"name": "ctr", "query": `sum(rate(clicks_total{version="${version}"}[5m]))`,
		"direction": "higher_is_better", "min_relative_change": -0.02, "count_query": "x", "min_count": 1000.0, "min_samples": 3.0}
	checks, err := ParseChecks([]any{ok}, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := checks[0]
	if !c.Relative() || c.MinSamples != 3 || c.MinCount != 1000 || c.OnNoData != NoDataFail || c.ThresholdText() != "min_relative_change -0.02 (higher_is_better)" {
		t.Fatalf("check = %+v (%s)", c, c.ThresholdText())
	}
	for _, tc := range []struct {
		check map[string]any
		want  string
	}{
		{map[string]any{"name": "a", "query": "q"}, "exactly one threshold"},
		{map[string]any{"name": "a", "query": "q", "max": 1.0, "min": 0.0}, "exactly one threshold"},
		{map[string]any{"name": "a", "max": 1.0}, "query is required"},
		{map[string]any{"name": "a", "query": "q", "min_relative_change": -0.1}, "direction: required"},
		{map[string]any{"name": "a", "query": "q", "max": 1.0, "min_count": 5.0}, "min_count needs count_query"},
		{map[string]any{"name": "a", "query": "q", "max": 1.0, "on_no_data": "pass"}, "on_no_data"},
		{map[string]any{"name": "a", "query": "q", "max": 1.0, "min_samples": 0.0}, "min_samples"},
		{map[string]any{"name": "a", "query": "q", "absolute": 1.0}, `unknown key "absolute"`},
	} {
		_, err := ParseChecks([]any{tc.check}, 0)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseChecks(%v) = %v, want an error with %q", tc.check, err, tc.want)
		}
	}
	if _, err := ParseChecks([]any{ok, ok}, 0); err == nil || !strings.Contains(err.Error(), "taken") {
		t.Errorf("two checks of one name: %v", err)
	}
}

func TestParseSpecURL(t *testing.T) {
	steps := []any{map[string]any{"percent": 100.0, "bake": "1m"}}
	checks := []any{map[string]any{"name": "a", "query": "q", "max": 1.0}}
	for _, u := range []string{"", "prometheus:9090", "ftp://x", "http://user:pw@x:9090"} {
		if _, err := ParseSpec(steps, checks, Settings{PrometheusURL: u}); err == nil || !strings.Contains(err.Error(), "prometheus_url") {
			t.Errorf("prometheus_url %q: %v", u, err)
		}
	}
	s, err := ParseSpec(steps, checks, Settings{PrometheusURL: "http://localhost:9090"})
	if err != nil || s.Interval != DefaultInterval {
		t.Fatalf("ParseSpec = %+v, %v", s, err)
	}
	if _, err := ParseSpec(steps, checks, Settings{Interval: "100ms", PrometheusURL: "http://localhost:9090"}); err == nil {
		t.Error("an interval under 1s was accepted")
	}
}

func TestQueryFor(t *testing.T) {
	got := QueryFor(`sum(rate(x{version="${version}",alias="${alias}"}[1m]))`, "v7", "canary")
	if got != `sum(rate(x{version="v7",alias="canary"}[1m]))` {
		t.Fatal(got)
	}
}

func TestCheckQueries(t *testing.T) {
	parse := func(items ...map[string]any) []Check {
		t.Helper()
		list := make([]any, len(items))
		for i, m := range items {
			list[i] = m
		}
		checks, err := ParseChecks(list, 0)
		if err != nil {
			t.Fatal(err)
		}
		return checks
	}
	ok := parse(
		map[string]any{"name": "ctr", "query": `sum(rate(clicks{version="${version}"}[5m]))`, "direction": "higher_is_better", "min_relative_change": -0.02,
			"count_query": `sum(increase(impressions{alias="${alias}"}[5m]))`, "min_count": 10.0},
		map[string]any{"name": "up", "query": "min(up)", "min": 1.0}, // absolute, fleet-wide: allowed
	)
	if err := CheckQueries(ok); err != nil {
		t.Fatalf("good checks refused: %v", err)
	}
	for _, c := range []struct {
		check map[string]any
		want  string
	}{
		{map[string]any{"name": "a", "query": `x{version="${verison}"}`, "max": 1.0}, `checks[0].query: unknown placeholder $${verison} (did you mean "version"?)`},
		{map[string]any{"name": "a", "query": `x{version="${version}"}`, "count_query": `n{v="${model}"}`, "max": 1.0}, "checks[0].count_query: unknown placeholder $${model}"},
		{map[string]any{"name": "a", "query": "sum(rate(clicks[5m]))", "direction": "higher_is_better", "min_absolute_change": 0.0}, "checks[0].query: the check compares with production (min_absolute_change 0 (higher_is_better)) but its query selects no version"},
	} {
		err := CheckQueries(parse(c.check))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.check, err, c.want)
		}
	}
}
