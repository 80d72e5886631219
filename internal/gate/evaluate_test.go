package gate

import (
	"math"
	"strings"
	"testing"
)

var (
	nan  = math.NaN()
	pinf = math.Inf(1)
	ninf = math.Inf(-1)
)

// side is one model's figure for the metric under test: absent, or a value.
type side struct {
	absent bool
	v      float64
}

func val(v float64) side { return side{v: v} }

var absent = side{absent: true}

// eval1 gates one metric "m" with threshold t. base == nil means no
// baseline at all; &absent means a baseline whose evaluation lacks "m".
func eval1(t *testing.T, cfg Config, cand side, base *side) Result {
	t.Helper()
	c := Candidate{ID: "cand-1", Metrics: map[string]float64{"other": 1}}
	if !cand.absent {
		c.Metrics["m"] = cand.v
	}
	var b *Baseline
	if base != nil {
		b = &Baseline{Version: "v7", Metrics: map[string]float64{"other": 1}}
		if !base.absent {
			b.Metrics["m"] = base.v
		}
	}
	r, err := Evaluate(cfg, c, b)
	if err != nil {
		t.Fatalf("Evaluate: %v", err)
	}
	return r
}

func one(th Threshold) Config { return Config{Metrics: map[string]Threshold{"m": th}} }

// want describes the single comparison a case expects.
type want struct {
	passed  bool
	skipped bool
	reason  string // substring of the comparison's reason
	gate    bool   // Result.Passed
}

func checkOne(t *testing.T, r Result, check Check, w want) {
	t.Helper()
	if len(r.Comparisons) != 1 {
		t.Fatalf("got %d comparisons, want 1: %+v", len(r.Comparisons), r.Comparisons)
	}
	c := r.Comparisons[0]
	if c.Check != check || c.Metric != "m" {
		t.Errorf("comparison is %s %s, want m %s", c.Metric, c.Check, check)
	}
	if c.Passed != w.passed || c.Skipped != w.skipped {
		t.Errorf("passed=%v skipped=%v, want passed=%v skipped=%v (reason %q)", c.Passed, c.Skipped, w.passed, w.skipped, c.Reason)
	}
	if !strings.Contains(c.Reason, w.reason) {
		t.Errorf("reason %q does not contain %q", c.Reason, w.reason)
	}
	if r.Passed != w.gate {
		t.Errorf("gate passed=%v, want %v (%s)", r.Passed, w.gate, r.Reason)
	}
}

func TestValueBounds(t *testing.T) {
	for _, dir := range []Direction{"", HigherIsBetter, LowerIsBetter} {
		cases := []struct {
			name  string
			th    Threshold
			check Check
			cand  side
			want  want
		}{
			{"above min", Threshold{Min: new(0.7)}, CheckValueMin, val(0.71), want{passed: true, gate: true, reason: ">= min 0.7"}},
			{"exactly min", Threshold{Min: new(0.7)}, CheckValueMin, val(0.7), want{passed: true, gate: true}},
			{"below min", Threshold{Min: new(0.7)}, CheckValueMin, val(math.Nextafter(0.7, 0)), want{reason: "is below min 0.7"}},
			{"below max", Threshold{Max: new(0.3)}, CheckValueMax, val(0.29), want{passed: true, gate: true, reason: "<= max 0.3"}},
			{"exactly max", Threshold{Max: new(0.3)}, CheckValueMax, val(0.3), want{passed: true, gate: true}},
			{"above max", Threshold{Max: new(0.3)}, CheckValueMax, val(math.Nextafter(0.3, 1)), want{reason: "is above max 0.3"}},
			{"negative min", Threshold{Min: new(-1.5)}, CheckValueMin, val(-1.5), want{passed: true, gate: true}},
			{"NaN vs min", Threshold{Min: new(0.7)}, CheckValueMin, val(nan), want{reason: "candidate m is NaN"}},
			{"NaN vs max", Threshold{Max: new(0.3)}, CheckValueMax, val(nan), want{reason: "candidate m is NaN"}},
			// +Inf >= min is true in IEEE arithmetic: it must still fail.
			{"+Inf vs min", Threshold{Min: new(0.7)}, CheckValueMin, val(pinf), want{reason: "candidate m is +Inf"}},
			{"+Inf vs max", Threshold{Max: new(0.3)}, CheckValueMax, val(pinf), want{reason: "candidate m is +Inf"}},
			{"-Inf vs min", Threshold{Min: new(0.7)}, CheckValueMin, val(ninf), want{reason: "candidate m is -Inf"}},
			{"-Inf vs max", Threshold{Max: new(0.3)}, CheckValueMax, val(ninf), want{reason: "candidate m is -Inf"}},
			{"missing", Threshold{Min: new(0.7)}, CheckValueMin, absent, want{reason: `metric "m" is missing from the candidate's evaluation`}},
		}
		for _, tc := range cases {
			t.Run(string(dir)+"/"+tc.name, func(t *testing.T) {
				tc.th.Direction = dir
				b := val(0.5)
				// Value bounds ignore the baseline: the same with and
				// without one, and with a broken one.
				for _, base := range []*side{nil, &b, &absent, {v: nan}} {
					r := eval1(t, one(tc.th), tc.cand, base)
					checkOne(t, r, tc.check, tc.want)
					c := r.Comparisons[0]
					if c.Baseline != nil || c.Diff != nil || c.Improvement != nil {
						t.Errorf("value check carries baseline figures: %+v", c)
					}
					if c.Direction != "" {
						t.Errorf("value check carries direction %q", c.Direction)
					}
				}
			})
		}
	}
}

func TestMinEqualsMax(t *testing.T) {
	cfg := one(Threshold{Min: new(1.0), Max: new(1.0)})
	r := eval1(t, cfg, val(1), nil)
	if !r.Passed || len(r.Comparisons) != 2 {
		t.Fatalf("value exactly at min == max: %+v", r)
	}
	r = eval1(t, cfg, val(1.0000001), nil)
	if r.Passed || r.Comparisons[0].Passed != true || r.Comparisons[1].Passed != false {
		t.Fatalf("value above min == max: %+v", r)
	}
}

// Figures below are exact in binary floating point, so "at the threshold"
// is exactly at it.
func TestAbsoluteChange(t *testing.T) {
	cases := []struct {
		name      string
		dir       Direction
		threshold float64
		cand      float64
		base      float64
		diff      float64
		want      want
	}{
		// higher_is_better: improvement = c - b.
		{"higher: improves", HigherIsBetter, 0, 0.75, 0.5, 0.25, want{passed: true, gate: true, reason: "improvement 0.25 >= minimum 0"}},
		{"higher: equal, zero threshold", HigherIsBetter, 0, 0.5, 0.5, 0, want{passed: true, gate: true}},
		{"higher: drop within tolerance", HigherIsBetter, -0.25, 0.375, 0.5, -0.125, want{passed: true, gate: true}},
		{"higher: drop exactly at tolerance", HigherIsBetter, -0.25, 0.25, 0.5, -0.25, want{passed: true, gate: true}},
		{"higher: drop beyond tolerance", HigherIsBetter, -0.25, 0.125, 0.5, -0.375, want{reason: "improvement -0.375 is below minimum -0.25"}},
		{"higher: required gain met exactly", HigherIsBetter, 0.25, 0.75, 0.5, 0.25, want{passed: true, gate: true}},
		{"higher: required gain missed", HigherIsBetter, 0.25, 0.625, 0.5, 0.125, want{reason: "below minimum 0.25"}},
		{"higher: any drop with zero threshold", HigherIsBetter, 0, math.Nextafter(0.5, 0), 0.5, math.Nextafter(0.5, 0) - 0.5, want{reason: "below minimum 0"}},
		// lower_is_better: improvement = b - c.
		{"lower: improves", LowerIsBetter, 0, 0.25, 0.5, -0.25, want{passed: true, gate: true, reason: "improvement 0.25 >= minimum 0"}},
		{"lower: rise within tolerance", LowerIsBetter, -0.25, 0.625, 0.5, 0.125, want{passed: true, gate: true}},
		{"lower: rise exactly at tolerance", LowerIsBetter, -0.25, 0.75, 0.5, 0.25, want{passed: true, gate: true}},
		{"lower: rise beyond tolerance", LowerIsBetter, -0.25, 0.875, 0.5, 0.375, want{reason: "improvement -0.375 is below minimum -0.25"}},
		{"lower: required drop met exactly", LowerIsBetter, 0.25, 0.25, 0.5, -0.25, want{passed: true, gate: true}},
		{"lower: required drop missed", LowerIsBetter, 0.25, 0.375, 0.5, -0.125, want{reason: "below minimum 0.25"}},
		{"lower: negative figures", LowerIsBetter, 0, -3, -2, -1, want{passed: true, gate: true}},
		// The absolute check does not care about a zero baseline.
		{"higher: zero baseline", HigherIsBetter, 0, 0.5, 0, 0.5, want{passed: true, gate: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := val(tc.base)
			r := eval1(t, one(Threshold{Direction: tc.dir, MinAbsoluteChange: new(tc.threshold)}), val(tc.cand), &b)
			checkOne(t, r, CheckMinAbsoluteChange, tc.want)
			c := r.Comparisons[0]
			if c.Diff == nil || float64(*c.Diff) != tc.diff {
				t.Errorf("diff = %v, want %v", c.Diff, tc.diff)
			}
			wantImp := tc.diff
			if tc.dir == LowerIsBetter {
				wantImp = -tc.diff
			}
			if c.Improvement == nil || float64(*c.Improvement) != wantImp {
				t.Errorf("improvement = %v, want %v", c.Improvement, wantImp)
			}
			if *c.Candidate != Number(tc.cand) || *c.Baseline != Number(tc.base) || c.Threshold != Number(tc.threshold) {
				t.Errorf("figures: %+v", c)
			}
			if c.Direction != tc.dir {
				t.Errorf("direction %q, want %q", c.Direction, tc.dir)
			}
		})
	}
}

func TestRelativeChange(t *testing.T) {
	cases := []struct {
		name      string
		dir       Direction
		threshold float64
		cand      float64
		base      float64
		rel       float64 // (c - b) / |b|
		want      want
	}{
		{"higher: +25%", HigherIsBetter, 0, 2.5, 2, 0.25, want{passed: true, gate: true, reason: "relative improvement 0.25"}},
		{"higher: -25% at tolerance", HigherIsBetter, -0.25, 1.5, 2, -0.25, want{passed: true, gate: true}},
		{"higher: -50% beyond tolerance", HigherIsBetter, -0.25, 1, 2, -0.5, want{reason: "relative improvement -0.5 is below minimum -0.25"}},
		{"lower: -25% is an improvement", LowerIsBetter, 0.25, 1.5, 2, -0.25, want{passed: true, gate: true}},
		{"lower: +25% at tolerance", LowerIsBetter, -0.25, 2.5, 2, 0.25, want{passed: true, gate: true}},
		{"lower: +50% beyond tolerance", LowerIsBetter, -0.25, 3, 2, 0.5, want{reason: "relative improvement -0.5 is below minimum -0.25"}},
		// Negative baseline: divided by |b|, so the sign of the relative
		// change is the sign of c - b. TFX's (c - b) / b gives -0.25 for
		// the first case and fails a model that got better.
		{"higher: negative baseline improves", HigherIsBetter, 0.25, -1.5, -2, 0.25, want{passed: true, gate: true}},
		{"higher: negative baseline worsens", HigherIsBetter, 0, -2.5, -2, -0.25, want{reason: "below minimum 0"}},
		{"lower: negative baseline improves", LowerIsBetter, 0.25, -2.5, -2, -0.25, want{passed: true, gate: true}},
		{"lower: negative baseline worsens", LowerIsBetter, 0, -1.5, -2, 0.25, want{reason: "below minimum 0"}},
		{"higher: from negative to positive", HigherIsBetter, 1, 2, -2, 2, want{passed: true, gate: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := val(tc.base)
			r := eval1(t, one(Threshold{Direction: tc.dir, MinRelativeChange: new(tc.threshold)}), val(tc.cand), &b)
			checkOne(t, r, CheckMinRelativeChange, tc.want)
			c := r.Comparisons[0]
			if c.Diff == nil || float64(*c.Diff) != tc.rel {
				t.Errorf("relative diff = %v, want %v", c.Diff, tc.rel)
			}
		})
	}
}

func TestZeroBaseline(t *testing.T) {
	zero, negZero := val(0), val(math.Copysign(0, -1))
	for _, dir := range []Direction{HigherIsBetter, LowerIsBetter} {
		for _, b := range []side{zero, negZero} {
			name := string(dir) + "/" + Number(b.v).String()
			t.Run(name+"/fail", func(t *testing.T) {
				for _, mode := range []ZeroBaseline{"", ZeroBaselineFail} {
					cfg := one(Threshold{Direction: dir, MinRelativeChange: new(-0.5)})
					cfg.ZeroBaseline = mode
					r := eval1(t, cfg, val(0.5), &b)
					checkOne(t, r, CheckMinRelativeChange, want{reason: "baseline is 0: relative change undefined"})
					if r.Comparisons[0].Diff != nil {
						t.Errorf("diff set for an undefined relative change")
					}
				}
			})
			t.Run(name+"/skip_relative", func(t *testing.T) {
				// Relative and absolute together: the relative check is
				// skipped, the absolute one decides.
				cfg := one(Threshold{Direction: dir, MinAbsoluteChange: new(-1.0), MinRelativeChange: new(-0.5)})
				cfg.ZeroBaseline = ZeroBaselineSkipRelative
				r := eval1(t, cfg, val(0.5), &b)
				if len(r.Comparisons) != 2 {
					t.Fatalf("comparisons: %+v", r.Comparisons)
				}
				abs, rel := r.Comparisons[0], r.Comparisons[1]
				if abs.Check != CheckMinAbsoluteChange || !abs.Passed || abs.Skipped {
					t.Errorf("absolute: %+v", abs)
				}
				if rel.Check != CheckMinRelativeChange || !rel.Passed || !rel.Skipped || !strings.Contains(rel.Reason, "zero_baseline: skip_relative") {
					t.Errorf("relative: %+v", rel)
				}
				if !r.Passed || !strings.Contains(r.Reason, "1 skipped") {
					t.Errorf("gate: %v %q", r.Passed, r.Reason)
				}
			})
		}
	}
	t.Run("only relative checks all skipped", func(t *testing.T) {
		cfg := one(Threshold{Direction: HigherIsBetter, MinRelativeChange: new(0.0)})
		cfg.ZeroBaseline = ZeroBaselineSkipRelative
		r := eval1(t, cfg, val(0.5), &zero)
		checkOne(t, r, CheckMinRelativeChange, want{passed: true, skipped: true, gate: false})
		if !strings.Contains(r.Reason, "nothing was checked") {
			t.Errorf("reason %q", r.Reason)
		}
	})
	t.Run("a tiny baseline is not zero", func(t *testing.T) {
		tiny := val(5e-324)
		r := eval1(t, one(Threshold{Direction: HigherIsBetter, MinRelativeChange: new(0.0)}), val(1), &tiny)
		// (1 - 5e-324) / 5e-324 overflows to +Inf.
		checkOne(t, r, CheckMinRelativeChange, want{reason: "relative change +Inf is not finite"})
	})
}

func TestNonFinite(t *testing.T) {
	figures := []float64{nan, pinf, ninf}
	for _, dir := range []Direction{HigherIsBetter, LowerIsBetter} {
		for _, check := range []Check{CheckMinAbsoluteChange, CheckMinRelativeChange} {
			th := Threshold{Direction: dir}
			if check == CheckMinAbsoluteChange {
				// A huge tolerance: an infinite diff must not slip under it.
				th.MinAbsoluteChange = new(-math.MaxFloat64)
			} else {
				th.MinRelativeChange = new(-math.MaxFloat64)
			}
			for _, f := range figures {
				name := string(dir) + "/" + string(check) + "/" + Number(f).String()
				t.Run(name+"/candidate", func(t *testing.T) {
					b := val(0.5)
					r := eval1(t, one(th), val(f), &b)
					checkOne(t, r, check, want{reason: "candidate m is " + Number(f).String()})
				})
				t.Run(name+"/baseline", func(t *testing.T) {
					b := val(f)
					r := eval1(t, one(th), val(0.5), &b)
					checkOne(t, r, check, want{reason: "baseline m is " + Number(f).String()})
					if c := r.Comparisons[0]; c.Baseline == nil || c.Diff != nil {
						t.Errorf("figures: %+v", c)
					}
				})
				t.Run(name+"/both", func(t *testing.T) {
					b := val(f)
					r := eval1(t, one(th), val(f), &b)
					// The candidate is the first problem reported.
					checkOne(t, r, check, want{reason: "candidate m is " + Number(f).String()})
				})
				t.Run(name+"/no baseline", func(t *testing.T) {
					// Skipping change checks must not hide a broken
					// candidate.
					for _, mode := range []NoBaseline{NoBaselineValueOnly, NoBaselineBless, NoBaselineBlock} {
						cfg := one(th)
						cfg.NoBaseline = mode
						r := eval1(t, cfg, val(f), nil)
						checkOne(t, r, check, want{reason: "candidate m is " + Number(f).String()})
					}
				})
			}
		}
	}
	t.Run("overflowing diff", func(t *testing.T) {
		b := val(-math.MaxFloat64)
		r := eval1(t, one(Threshold{Direction: HigherIsBetter, MinAbsoluteChange: new(0.0)}), val(math.MaxFloat64), &b)
		checkOne(t, r, CheckMinAbsoluteChange, want{reason: "change +Inf is not finite"})
	})
}

func TestMissingMetric(t *testing.T) {
	th := Threshold{Direction: HigherIsBetter, Min: new(0.5), Max: new(0.9), MinAbsoluteChange: new(0.0), MinRelativeChange: new(0.0)}
	t.Run("candidate", func(t *testing.T) {
		for _, base := range []*side{nil, {v: 0.5}} {
			r := eval1(t, one(th), absent, base)
			if r.Passed || len(r.Comparisons) != 4 {
				t.Fatalf("result: %+v", r)
			}
			for _, c := range r.Comparisons {
				if c.Passed || c.Candidate != nil || !strings.Contains(c.Reason, `metric "m" is missing from the candidate's evaluation`) {
					t.Errorf("%s: %+v", c.Check, c)
				}
			}
			if !strings.Contains(r.Reason, "4 of 4 checks failed") {
				t.Errorf("reason %q", r.Reason)
			}
		}
	})
	t.Run("baseline", func(t *testing.T) {
		r := eval1(t, one(th), val(0.75), &absent)
		if r.Passed {
			t.Fatalf("passed: %+v", r)
		}
		for _, c := range r.Comparisons {
			switch c.Check {
			case CheckValueMin, CheckValueMax:
				if !c.Passed {
					t.Errorf("%s: %+v", c.Check, c)
				}
			default:
				if c.Passed || !strings.Contains(c.Reason, `metric "m" is missing from the baseline's evaluation (version v7)`) {
					t.Errorf("%s: %+v", c.Check, c)
				}
			}
		}
	})
}

func TestNoBaseline(t *testing.T) {
	bounds := Threshold{Direction: HigherIsBetter, Min: new(0.7), MinAbsoluteChange: new(-0.01), MinRelativeChange: new(-0.01)}
	changeOnly := Threshold{Direction: HigherIsBetter, MinAbsoluteChange: new(-0.01)}
	cases := []struct {
		name     string
		mode     NoBaseline
		th       Threshold
		cand     float64
		gate     bool
		reason   string // of the result
		change   want   // for each change comparison; gate field unused
		minCheck *bool  // outcome of the min check, if configured
	}{
		{"value_only: bounds pass", NoBaselineValueOnly, bounds, 0.8, true, "1 passed, 2 skipped",
			want{passed: true, skipped: true, reason: "skipped: no baseline (no_baseline: value_only)"}, new(true)},
		{"default is value_only", "", bounds, 0.8, true, "",
			want{passed: true, skipped: true, reason: "no_baseline: value_only"}, new(true)},
		{"value_only: bounds fail", NoBaselineValueOnly, bounds, 0.6, false, "1 of 3 checks failed: m value_min",
			want{passed: true, skipped: true}, new(false)},
		{"value_only: nothing to check", NoBaselineValueOnly, changeOnly, 0.8, false, "nothing was checked: no baseline and no value bounds",
			want{passed: true, skipped: true}, nil},
		{"block: change checks fail", NoBaselineBlock, bounds, 0.8, false, "2 of 3 checks failed",
			want{reason: "no baseline: no production model to compare with (no_baseline: block)"}, new(true)},
		{"block: change only", NoBaselineBlock, changeOnly, 0.8, false, "1 of 1 checks failed",
			want{reason: "no_baseline: block"}, nil},
		{"bless: bounds pass", NoBaselineBless, bounds, 0.8, true, "1 passed, 2 skipped",
			want{passed: true, skipped: true, reason: "skipped: no baseline (no_baseline: bless)"}, new(true)},
		// Value bounds still apply under bless.
		{"bless: bounds fail", NoBaselineBless, bounds, 0.6, false, "m value_min",
			want{passed: true, skipped: true}, new(false)},
		{"bless: nothing to check passes", NoBaselineBless, changeOnly, 0.8, true, "blessed without checks",
			want{passed: true, skipped: true}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := one(tc.th)
			cfg.NoBaseline = tc.mode
			r := eval1(t, cfg, val(tc.cand), nil)
			if r.Passed != tc.gate || !strings.Contains(r.Reason, tc.reason) {
				t.Errorf("gate passed=%v reason=%q, want %v %q", r.Passed, r.Reason, tc.gate, tc.reason)
			}
			if r.HasBaseline || r.BaselineVersion != "" || r.CandidateID != "cand-1" {
				t.Errorf("ids: %+v", r)
			}
			for _, c := range r.Comparisons {
				switch c.Check {
				case CheckValueMin:
					if tc.minCheck == nil || c.Passed != *tc.minCheck || c.Skipped {
						t.Errorf("min: %+v", c)
					}
				case CheckMinAbsoluteChange, CheckMinRelativeChange:
					if c.Passed != tc.change.passed || c.Skipped != tc.change.skipped || !strings.Contains(c.Reason, tc.change.reason) {
						t.Errorf("%s: %+v", c.Check, c)
					}
					if c.Baseline != nil || c.Diff != nil {
						t.Errorf("%s has baseline figures without a baseline: %+v", c.Check, c)
					}
				}
			}
		})
	}
}

func TestEvaluateSeveralMetrics(t *testing.T) {
	cfg := Config{Metrics: map[string]Threshold{
		"logloss":  {Direction: LowerIsBetter, MinRelativeChange: new(-0.01)},
		"auc":      {Direction: HigherIsBetter, Min: new(0.7), Max: new(1.0), MinAbsoluteChange: new(-0.002)},
		"accuracy": {Min: new(0.5)},
	}}
	cand := Candidate{ID: "run-42/model", Metrics: map[string]float64{"auc": 0.801, "logloss": 0.4, "accuracy": 0.9, "unused": nan}}
	base := &Baseline{Version: "v3", Metrics: map[string]float64{"auc": 0.8, "logloss": 0.41}}
	r, err := Evaluate(cfg, cand, base)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, c := range r.Comparisons {
		order = append(order, c.Metric+"/"+string(c.Check))
	}
	if got, want := strings.Join(order, " "), "accuracy/value_min auc/value_min auc/value_max auc/min_absolute_change logloss/min_relative_change"; got != want {
		t.Errorf("order %q, want %q", got, want)
	}
	if !r.Passed || r.BaselineVersion != "v3" || r.CandidateID != "run-42/model" || !r.HasBaseline || r.Forced {
		t.Errorf("result: %+v", r)
	}
	if len(r.Failed()) != 0 {
		t.Errorf("failed: %+v", r.Failed())
	}

	// One regression beyond tolerance fails the gate and is named.
	cand.Metrics["logloss"] = 0.42
	r, err = Evaluate(cfg, cand, base)
	if err != nil {
		t.Fatal(err)
	}
	if r.Passed || len(r.Failed()) != 1 || r.Failed()[0].Metric != "logloss" || !strings.Contains(r.Reason, "1 of 5 checks failed: logloss min_relative_change") {
		t.Errorf("result: passed=%v reason=%q failed=%+v", r.Passed, r.Reason, r.Failed())
	}
}

func TestEvaluateRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{{}, one(Threshold{Direction: "up", MinAbsoluteChange: new(0.0)})} {
		if _, err := Evaluate(cfg, Candidate{Metrics: map[string]float64{"m": 1}}, nil); err == nil {
			t.Errorf("Evaluate(%+v) succeeded", cfg)
		}
	}
}

func TestEvaluateDoesNotMutateInputs(t *testing.T) {
	cfg := one(Threshold{Direction: HigherIsBetter, MinAbsoluteChange: new(0.0)})
	cand := Candidate{Metrics: map[string]float64{"m": 1}}
	base := &Baseline{Metrics: map[string]float64{"m": 1}}
	if _, err := Evaluate(cfg, cand, base); err != nil {
		t.Fatal(err)
	}
	if len(cand.Metrics) != 1 || len(base.Metrics) != 1 || cfg.NoBaseline != "" || cfg.ZeroBaseline != "" {
		t.Errorf("inputs changed: %+v %+v %+v", cfg, cand, base)
	}
}
