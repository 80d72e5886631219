package gate

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// Check names one kind of comparison.
type Check string

// Checks, in the order a metric's comparisons are listed.
const (
	CheckValueMin          Check = "value_min"
	CheckValueMax          Check = "value_max"
	CheckMinAbsoluteChange Check = "min_absolute_change"
	CheckMinRelativeChange Check = "min_relative_change"
)

// Candidate is the evaluation of the model being gated.
type Candidate struct {
	ID      string             `json:"id"`
	Metrics map[string]float64 `json:"metrics"`
}

// Baseline is the evaluation of the model in production, on the same data.
type Baseline struct {
	Version string             `json:"version"`
	Metrics map[string]float64 `json:"metrics"`
}

// Comparison is the outcome of one check of one metric.
type Comparison struct {
	Metric    string    `json:"metric"`
	Check     Check     `json:"check"`
	Direction Direction `json:"direction,omitempty"`
	// Candidate is null when the metric is missing from the candidate.
	Candidate *Number `json:"candidate"`
	// Baseline is null for value checks and when there is no baseline
	// figure.
	Baseline *Number `json:"baseline"`
	// Diff is the change the threshold applies to, in the check's units:
	// candidate - baseline for "min_absolute_change", (candidate -
	// baseline) / |baseline| for "min_relative_change"; null for value
	// checks or when it could not be computed.
	Diff *Number `json:"diff"`
	// Improvement is Diff in the better direction (Diff for
	// higher_is_better, -Diff for lower_is_better): a change check passes
	// when Improvement >= Threshold.
	Improvement *Number `json:"improvement"`
	// Threshold is the configured figure: the bound for value checks, the
	// minimum improvement for change checks.
	Threshold Number `json:"threshold"`
	// Passed reports whether this comparison lets the gate pass. A skipped
	// comparison passes; Reason says why it was skipped.
	Passed  bool   `json:"passed"`
	Skipped bool   `json:"skipped,omitempty"`
	Reason  string `json:"reason"`
}

// Result is a gate's verdict and the comparisons behind it.
type Result struct {
	Passed      bool         `json:"passed"`
	Reason      string       `json:"reason"`
	Comparisons []Comparison `json:"comparisons"`
	// HasBaseline is false when there was no production model.
	HasBaseline     bool   `json:"has_baseline"`
	BaselineVersion string `json:"baseline_version"`
	CandidateID     string `json:"candidate_id"`
	// Forced is set by Force: Passed is a human's decision, not the
	// comparisons'.
	Forced      bool   `json:"forced"`
	ForcedBy    string `json:"forced_by,omitempty"`
	ForceReason string `json:"force_reason,omitempty"`
}

// Failed returns the comparisons that did not pass.
func (r Result) Failed() []Comparison {
	var out []Comparison
	for _, c := range r.Comparisons {
		if !c.Passed {
			out = append(out, c)
		}
	}
	return out
}

// Evaluate gates candidate against cfg and, when there is a production
// model, against baseline (nil when there is none). It returns an error
// only when cfg is invalid; every problem with the figures is a failed
// comparison with a reason. See the package documentation for the rules.
func Evaluate(cfg Config, candidate Candidate, baseline *Baseline) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	r := Result{
		CandidateID: candidate.ID,
		HasBaseline: baseline != nil,
	}
	if baseline != nil {
		r.BaselineVersion = baseline.Version
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Metrics)) {
		r.Comparisons = append(r.Comparisons, evaluateMetric(cfg, name, cfg.Metrics[name], candidate, baseline)...)
	}
	r.Passed, r.Reason = verdict(cfg, r)
	return r, nil
}

// verdict applies the gate-level rule: every comparison passed and at least
// one was evaluated, except that bless without a baseline may pass with
// nothing evaluated.
func verdict(cfg Config, r Result) (bool, string) {
	var failed []string
	evaluated, skipped := 0, 0
	for _, c := range r.Comparisons {
		switch {
		case c.Skipped:
			skipped++
		case c.Passed:
			evaluated++
		default:
			evaluated++
			failed = append(failed, fmt.Sprintf("%s %s: %s", c.Metric, c.Check, c.Reason))
		}
	}
	if len(failed) > 0 {
		return false, fmt.Sprintf("%d of %d checks failed: %s", len(failed), len(r.Comparisons), strings.Join(failed, "; "))
	}
	if evaluated == 0 {
		if !r.HasBaseline && cfg.noBaseline() == NoBaselineBless {
			return true, fmt.Sprintf("no baseline: blessed without checks (no_baseline: bless); %d change checks skipped", skipped)
		}
		if !r.HasBaseline {
			return false, fmt.Sprintf("nothing was checked: no baseline and no value bounds (no_baseline: %s); %d change checks skipped; set min/max or no_baseline: bless", cfg.noBaseline(), skipped)
		}
		return false, fmt.Sprintf("nothing was checked: all %d checks skipped", skipped)
	}
	if skipped > 0 {
		return true, fmt.Sprintf("%d passed, %d skipped", evaluated, skipped)
	}
	return true, fmt.Sprintf("all %d checks passed", evaluated)
}

// evaluateMetric returns the comparisons of one metric, in check order.
func evaluateMetric(cfg Config, name string, t Threshold, cand Candidate, base *Baseline) []Comparison {
	var out []Comparison
	cv, cok := cand.Metrics[name]

	// candidateProblem is why no check of this metric can pass, if any.
	candidateProblem := ""
	switch {
	case !cok:
		candidateProblem = fmt.Sprintf("metric %q is missing from the candidate's evaluation", name)
	case !finite(cv):
		candidateProblem = fmt.Sprintf("candidate %s is %s", name, Number(cv))
	}
	newComparison := func(check Check, threshold float64) Comparison {
		c := Comparison{Metric: name, Check: check, Threshold: Number(threshold)}
		if cok {
			c.Candidate = num(cv)
		}
		if check == CheckMinAbsoluteChange || check == CheckMinRelativeChange {
			c.Direction = t.Direction
		}
		return c
	}

	if t.Min != nil {
		c := newComparison(CheckValueMin, *t.Min)
		switch {
		case candidateProblem != "":
			c.Reason = candidateProblem
		case cv >= *t.Min:
			c.Passed = true
			c.Reason = fmt.Sprintf("%s %s >= min %s", name, Number(cv), Number(*t.Min))
		default:
			c.Reason = fmt.Sprintf("%s %s is below min %s", name, Number(cv), Number(*t.Min))
		}
		out = append(out, c)
	}
	if t.Max != nil {
		c := newComparison(CheckValueMax, *t.Max)
		switch {
		case candidateProblem != "":
			c.Reason = candidateProblem
		case cv <= *t.Max:
			c.Passed = true
			c.Reason = fmt.Sprintf("%s %s <= max %s", name, Number(cv), Number(*t.Max))
		default:
			c.Reason = fmt.Sprintf("%s %s is above max %s", name, Number(cv), Number(*t.Max))
		}
		out = append(out, c)
	}

	for _, ch := range []struct {
		check     Check
		threshold *float64
	}{{CheckMinAbsoluteChange, t.MinAbsoluteChange}, {CheckMinRelativeChange, t.MinRelativeChange}} {
		if ch.threshold == nil {
			continue
		}
		out = append(out, compareChange(cfg, name, t.Direction, ch.check, *ch.threshold, newComparison(ch.check, *ch.threshold), candidateProblem, cv, base))
	}
	return out
}

// compareChange fills in c, a change check of metric name, and returns it.
func compareChange(cfg Config, name string, dir Direction, check Check, threshold float64, c Comparison, candidateProblem string, cv float64, base *Baseline) Comparison {
	// Record the baseline figure whenever there is one, even when the
	// candidate's problem decides the check, so the record is complete.
	var (
		bv  float64
		bok bool
	)
	if base != nil {
		if bv, bok = base.Metrics[name]; bok {
			c.Baseline = num(bv)
		}
	}
	if candidateProblem != "" {
		c.Reason = candidateProblem
		return c
	}
	if base == nil {
		switch cfg.noBaseline() {
		case NoBaselineBlock:
			c.Reason = "no baseline: no production model to compare with (no_baseline: block)"
		default:
			c.Passed, c.Skipped = true, true
			c.Reason = fmt.Sprintf("skipped: no baseline (no_baseline: %s)", cfg.noBaseline())
		}
		return c
	}
	if !bok {
		c.Reason = fmt.Sprintf("metric %q is missing from the baseline's evaluation (version %s)", name, base.Version)
		return c
	}
	if !finite(bv) {
		c.Reason = fmt.Sprintf("baseline %s is %s", name, Number(bv))
		return c
	}

	diff := cv - bv
	unit := ""
	if check == CheckMinRelativeChange {
		if bv == 0 {
			if cfg.zeroBaseline() == ZeroBaselineSkipRelative {
				c.Passed, c.Skipped = true, true
				c.Reason = "skipped: baseline is 0, relative change undefined (zero_baseline: skip_relative)"
			} else {
				c.Reason = "baseline is 0: relative change undefined (set zero_baseline: skip_relative to skip)"
			}
			return c
		}
		diff /= math.Abs(bv)
		unit = " relative"
	}
	if !finite(diff) {
		// Finite figures whose difference overflows (1e308 - -1e308).
		c.Reason = fmt.Sprintf("%s%s change %s is not finite", name, unit, Number(diff))
		return c
	}
	improvement := diff
	if dir == LowerIsBetter {
		improvement = -diff
	}
	c.Diff, c.Improvement = num(diff), num(improvement)
	if improvement >= threshold {
		c.Passed = true
		c.Reason = fmt.Sprintf("%s%s improvement %s >= minimum %s (%s)", name, unit, Number(improvement), Number(threshold), dir)
	} else {
		c.Reason = fmt.Sprintf("%s%s improvement %s is below minimum %s (%s)", name, unit, Number(improvement), Number(threshold), dir)
	}
	return c
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
