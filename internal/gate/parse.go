package gate

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/retrain-ml/retrain/internal/number"
)

// ParseConfig decodes the `with` block of a gate node, as YAML or JSON
// decoders produce it (numbers as float64, int, json.Number and so on;
// numeric strings are accepted too, since templating yields text), and
// validates it. Unknown keys are errors, so a typo such as "relatve" is
// caught rather than silently dropping a check. Errors name the metric and
// key, and wrap ErrInvalidConfig.
func ParseConfig(with map[string]any) (Config, error) {
	var (
		cfg  Config
		errs []error
		// badMetrics is set when metrics were given but some failed to
		// parse: an empty result is then not "no thresholds configured".
		badMetrics bool
	)
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}

	for _, key := range slices.Sorted(maps.Keys(with)) {
		v := with[key]
		switch key {
		case "metrics":
			metrics, ok := asMap(v)
			if !ok {
				fail("metrics: want a map of metric name to checks, got %s", describe(v))
				badMetrics = true
				continue
			}
			cfg.Metrics = make(map[string]Threshold, len(metrics))
			for _, name := range slices.Sorted(maps.Keys(metrics)) {
				t, err := parseThreshold(name, metrics[name])
				if err != nil {
					errs = append(errs, err)
					badMetrics = true
					continue
				}
				cfg.Metrics[name] = t
			}
		case "no_baseline":
			s, ok := v.(string)
			if !ok {
				fail("no_baseline: want a string, got %s", describe(v))
				continue
			}
			cfg.NoBaseline = NoBaseline(s)
		case "zero_baseline":
			s, ok := v.(string)
			if !ok {
				fail("zero_baseline: want a string, got %s", describe(v))
				continue
			}
			cfg.ZeroBaseline = ZeroBaseline(s)
		default:
			fail("unknown key %q (want metrics, no_baseline or zero_baseline)", key)
		}
	}
	// Report what is wrong with the parts that did parse too, so one round
	// of edits fixes the spec; a metric that failed to parse is left out
	// rather than reported again as having no checks.
	errs = append(errs, cfg.validate(badMetrics)...)
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	return cfg, nil
}

func parseThreshold(name string, v any) (Threshold, error) {
	var (
		t    Threshold
		errs []error
	)
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: metrics.%s"+format, append([]any{ErrInvalidConfig, name}, args...)...))
	}
	if v == nil {
		// "auc:" with nothing under it; Validate would say the same, but
		// here we know it is the spec that is empty.
		fail(": no checks (set min, max, min_absolute_change or min_relative_change)")
		return t, errors.Join(errs...)
	}
	m, ok := asMap(v)
	if !ok {
		fail(": want a map of checks, got %s", describe(v))
		return t, errors.Join(errs...)
	}
	for _, key := range slices.Sorted(maps.Keys(m)) {
		val := m[key]
		var dst **float64
		switch key {
		case "direction":
			s, ok := val.(string)
			if !ok {
				fail(".direction: want a string, got %s", describe(val))
				continue
			}
			t.Direction = Direction(s)
			continue
		case "min":
			dst = &t.Min
		case "max":
			dst = &t.Max
		case "min_absolute_change":
			dst = &t.MinAbsoluteChange
		case "min_relative_change":
			dst = &t.MinRelativeChange
		default:
			if err := RemovedKeyError(name, key, val, m["direction"]); err != nil {
				errs = append(errs, err)
				continue
			}
			fail(": unknown key %q (want direction, min, max, min_absolute_change or min_relative_change)", key)
			continue
		}
		if val == nil {
			// A threshold of null is a typo, not a missing figure: say so
			// rather than "NaN is not a finite number".
			fail(".%s: want a number, got null", key)
			continue
		}
		f, err := number.Figure(val)
		if err != nil {
			fail(".%s: %v", key, err)
			continue
		}
		*dst = &f
	}
	return t, errors.Join(errs...)
}

// asMap accepts the map types YAML and JSON decoders produce.
func asMap(v any) (map[string]any, bool) {
	switch m := v.(type) {
	case map[string]any:
		return m, true
	case map[any]any:
		out := make(map[string]any, len(m))
		for k, v := range m {
			s, ok := k.(string)
			if !ok {
				return nil, false
			}
			out[s] = v
		}
		return out, true
	}
	return nil, false
}

func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("string %q", x)
	case bool:
		return fmt.Sprintf("bool %v", x)
	case []any:
		return "a list"
	case map[string]any, map[any]any:
		return "a map"
	}
	return fmt.Sprintf("%T", v)
}
