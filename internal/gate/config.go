package gate

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// Direction says which way a metric gets better.
type Direction string

// Directions.
const (
	HigherIsBetter Direction = "higher_is_better"
	LowerIsBetter  Direction = "lower_is_better"
)

// NoBaseline says what a gate does when there is no production model yet.
type NoBaseline string

// NoBaseline modes; the empty value means NoBaselineValueOnly.
const (
	NoBaselineValueOnly NoBaseline = "value_only"
	NoBaselineBlock     NoBaseline = "block"
	NoBaselineBless     NoBaseline = "bless"
)

// ZeroBaseline says what a relative check does when the baseline is 0.
type ZeroBaseline string

// ZeroBaseline modes; the empty value means ZeroBaselineFail.
const (
	ZeroBaselineFail         ZeroBaseline = "fail"
	ZeroBaselineSkipRelative ZeroBaseline = "skip_relative"
)

// Threshold holds the checks of one metric. A nil field is a check that is
// not configured; at least one must be set.
type Threshold struct {
	// Direction is required when MinAbsoluteChange or MinRelativeChange is
	// set.
	Direction Direction `json:"direction,omitempty"`
	// Min and Max bound the candidate's value, inclusive.
	Min *float64 `json:"min,omitempty"`
	Max *float64 `json:"max,omitempty"`
	// MinAbsoluteChange and MinRelativeChange are the least improvement
	// over the baseline in Direction (candidate - baseline for
	// higher_is_better, baseline - candidate for lower_is_better; relative:
	// divided by |baseline|); negative values tolerate a regression. The
	// names are MLflow's, whose direction-aware meaning they share (MLflow
	// takes positive figures only): TFX's "absolute" and "relative" bound
	// the raw change for lower_is_better, so a config copied from TFX under
	// those names would silently invert.
	MinAbsoluteChange *float64 `json:"min_absolute_change,omitempty"`
	MinRelativeChange *float64 `json:"min_relative_change,omitempty"`
}

// hasChange reports whether t compares with a baseline.
func (t Threshold) hasChange() bool { return t.MinAbsoluteChange != nil || t.MinRelativeChange != nil }

// Config is a gate's configuration: the `with` block of a gate node.
type Config struct {
	Metrics      map[string]Threshold `json:"metrics"`
	NoBaseline   NoBaseline           `json:"no_baseline,omitempty"`
	ZeroBaseline ZeroBaseline         `json:"zero_baseline,omitempty"`
}

// noBaseline returns the effective mode, filling in the default.
func (c Config) noBaseline() NoBaseline {
	if c.NoBaseline == "" {
		return NoBaselineValueOnly
	}
	return c.NoBaseline
}

// zeroBaseline returns the effective mode, filling in the default.
func (c Config) zeroBaseline() ZeroBaseline {
	if c.ZeroBaseline == "" {
		return ZeroBaselineFail
	}
	return c.ZeroBaseline
}

// ErrInvalidConfig is wrapped by every error from Validate and ParseConfig.
var ErrInvalidConfig = errors.New("invalid gate config")

// Validate reports every problem with c, in a stable order (gate-level
// first, then by metric name), so a DAG validator can reject a spec before
// a run. The error wraps ErrInvalidConfig.
func (c Config) Validate() error {
	return errors.Join(c.validate(false)...)
}

// validate returns the problems with c. allowEmpty skips the empty-metrics
// error, for ParseConfig when the metrics were there but failed to parse.
func (c Config) validate(allowEmpty bool) []error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}

	switch c.NoBaseline {
	case "", NoBaselineValueOnly, NoBaselineBlock, NoBaselineBless:
	default:
		add("no_baseline: unknown mode %q (want %s, %s or %s)", c.NoBaseline, NoBaselineValueOnly, NoBaselineBlock, NoBaselineBless)
	}
	switch c.ZeroBaseline {
	case "", ZeroBaselineFail, ZeroBaselineSkipRelative:
	default:
		add("zero_baseline: unknown mode %q (want %s or %s)", c.ZeroBaseline, ZeroBaselineFail, ZeroBaselineSkipRelative)
	}
	// An empty gate would bless every model (tfx#5148).
	if len(c.Metrics) == 0 {
		if !allowEmpty {
			add("metrics: no thresholds configured; a gate that checks nothing would pass every model")
		}
		return errs
	}

	anyChange := false
	for _, name := range slices.Sorted(maps.Keys(c.Metrics)) {
		t := c.Metrics[name]
		if strings.TrimSpace(name) == "" {
			add("metrics: empty metric name")
			continue
		}
		anyChange = anyChange || t.hasChange()
		if t.Min == nil && t.Max == nil && !t.hasChange() {
			add("metrics.%s: no checks (set min, max, min_absolute_change or min_relative_change)", name)
		}
		switch t.Direction {
		case HigherIsBetter, LowerIsBetter:
		case "":
			if t.hasChange() {
				add("metrics.%s.direction: required with min_absolute_change or min_relative_change (want %s or %s)", name, HigherIsBetter, LowerIsBetter)
			}
		default:
			add("metrics.%s.direction: unknown direction %q (want %s or %s)", name, t.Direction, HigherIsBetter, LowerIsBetter)
		}
		for _, f := range []struct {
			key string
			v   *float64
		}{{"min", t.Min}, {"max", t.Max}, {"min_absolute_change", t.MinAbsoluteChange}, {"min_relative_change", t.MinRelativeChange}} {
			if f.v != nil && (math.IsNaN(*f.v) || math.IsInf(*f.v, 0)) {
				add("metrics.%s.%s: %v is not a finite number", name, f.key, *f.v)
			}
		}
		if t.Min != nil && t.Max != nil && *t.Min > *t.Max {
			add("metrics.%s: min %v is greater than max %v", name, *t.Min, *t.Max)
		}
	}
	if c.NoBaseline == NoBaselineBlock && !anyChange {
		add("no_baseline: block has no effect: no metric has a min_absolute_change or min_relative_change threshold")
	}
	return errs
}
