package gate

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestNumberJSON(t *testing.T) {
	cases := []struct {
		n    Number
		json string
	}{
		{0.7, "0.7"}, {-0.002, "-0.002"}, {0, "0"}, {1e21, "1e+21"}, {math.MaxFloat64, "1.7976931348623157e+308"},
		{Number(nan), `"NaN"`}, {Number(pinf), `"+Inf"`}, {Number(ninf), `"-Inf"`},
	}
	for _, tc := range cases {
		b, err := json.Marshal(tc.n)
		if err != nil {
			t.Errorf("Marshal(%v): %v", tc.n, err)
			continue
		}
		if string(b) != tc.json {
			t.Errorf("Marshal(%v) = %s, want %s", tc.n, b, tc.json)
		}
		var back Number
		if err := json.Unmarshal(b, &back); err != nil {
			t.Errorf("Unmarshal(%s): %v", b, err)
			continue
		}
		if back != tc.n && !(math.IsNaN(float64(back)) && math.IsNaN(float64(tc.n))) {
			t.Errorf("round trip of %v gave %v", tc.n, back)
		}
	}
	var n Number
	if err := json.Unmarshal([]byte(`"Inf"`), &n); err != nil || !math.IsInf(float64(n), 1) {
		t.Errorf(`"Inf": %v %v`, n, err)
	}
	for _, bad := range []string{`"nan"`, `"high"`, `true`, `{}`} {
		if err := json.Unmarshal([]byte(bad), &n); err == nil {
			t.Errorf("Unmarshal(%s) succeeded", bad)
		}
	}
}

// A result full of non-finite figures must encode: the run record of a
// failed gate is exactly where they show up.
func TestResultJSON(t *testing.T) {
	cfg := Config{Metrics: map[string]Threshold{
		"auc":     {Direction: HigherIsBetter, Min: new(0.7), MinAbsoluteChange: new(0.0)},
		"logloss": {Direction: LowerIsBetter, MinRelativeChange: new(0.0)},
		"missing": {Max: new(1.0)},
	}}
	r, err := Evaluate(cfg,
		Candidate{ID: "c", Metrics: map[string]float64{"auc": nan, "logloss": pinf}},
		&Baseline{Version: "v1", Metrics: map[string]float64{"auc": ninf, "logloss": 0.5}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	s := string(b)
	for _, want := range []string{`"candidate":"NaN"`, `"candidate":"+Inf"`, `"candidate":null`, `"baseline":null`, `"baseline":0.5`, `"diff":null`, `"passed":false`, `"baseline_version":"v1"`, `"candidate_id":"c"`} {
		if !strings.Contains(s, want) {
			t.Errorf("JSON lacks %s: %s", want, s)
		}
	}
	var back Result
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	if len(back.Comparisons) != len(r.Comparisons) || back.Passed || !math.IsNaN(float64(*back.Comparisons[0].Candidate)) {
		t.Errorf("round trip: %+v", back)
	}

	// Any map[string]any view of the result (as run outputs are kept) is
	// plain JSON too.
	var generic map[string]any
	if err := json.Unmarshal(b, &generic); err != nil {
		t.Fatal(err)
	}
	if generic["passed"] != false {
		t.Errorf("passed = %v", generic["passed"])
	}
}

func TestForce(t *testing.T) {
	cfg := one(Threshold{Direction: HigherIsBetter, MinAbsoluteChange: new(0.0)})
	b := val(0.8)
	failed := eval1(t, cfg, val(0.7), &b)
	if failed.Passed {
		t.Fatal("setup: gate passed")
	}

	t.Run("records who and why", func(t *testing.T) {
		f, err := Force(failed, " alice@example.com ", " known label shift in eval data ")
		if err != nil {
			t.Fatal(err)
		}
		if !f.Passed || !f.Forced || f.ForcedBy != "alice@example.com" || f.ForceReason != "known label shift in eval data" {
			t.Errorf("forced: %+v", f)
		}
		// The evidence stays: the failed comparison and the gate's reason.
		if len(f.Comparisons) != 1 || f.Comparisons[0].Passed || f.Reason != failed.Reason || f.BaselineVersion != "v7" {
			t.Errorf("forced result lost the record: %+v", f)
		}
		// Force is pure: the input is untouched and not aliased.
		if failed.Passed || failed.Forced {
			t.Errorf("input changed: %+v", failed)
		}
		f.Comparisons[0].Reason = "changed"
		if failed.Comparisons[0].Reason == "changed" {
			t.Error("forced result aliases the input's comparisons")
		}
		b, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"forced":true,"forced_by":"alice@example.com","force_reason":"known label shift in eval data"`) {
			t.Errorf("JSON: %s", b)
		}
	})
	t.Run("reason and who required", func(t *testing.T) {
		for _, args := range [][2]string{{"alice", ""}, {"alice", "  "}, {"", "because"}, {" ", "because"}} {
			if _, err := Force(failed, args[0], args[1]); err == nil {
				t.Errorf("Force(%q, %q) succeeded", args[0], args[1])
			}
		}
	})
	t.Run("once", func(t *testing.T) {
		f, err := Force(failed, "alice", "ok")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Force(f, "bob", "again"); err == nil || !strings.Contains(err.Error(), "already forced by alice") {
			t.Errorf("second Force: %v", err)
		}
	})
	t.Run("a passed result", func(t *testing.T) {
		// Forcing a pass is allowed and still recorded: the override is
		// the audit trail, whatever the verdict was.
		ok := eval1(t, cfg, val(0.9), &b)
		f, err := Force(ok, "alice", "belt and braces")
		if err != nil || !f.Passed || !f.Forced {
			t.Errorf("Force(passed): %+v %v", f, err)
		}
	})
}
