package gate

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/retrain-ml/retrain/internal/number"
)

// removedKeys maps each threshold key that is no longer accepted to the key
// that replaced it. The old keys carried TFX's names without TFX's meaning
// for lower_is_better (TFX passes when candidate - baseline <= threshold;
// here they were the least improvement), so a config copied from TFX
// inverted silently; refusing them makes every such config say which it
// means.
var removedKeys = map[string]string{
	"absolute": "min_absolute_change",
	"relative": "min_relative_change",
}

// RemovedKeyError explains why key, a threshold of metric, is refused when
// it is one of the removed keys ("absolute", "relative"), and gives the
// setting that means what the old key meant here; it returns nil for any
// other key. value is the old key's value and direction the metric's
// direction, as written (a ${...} reference, or nothing, is fine: the
// message then repeats the value as written). The error wraps
// ErrInvalidConfig.
func RemovedKeyError(metric, key string, value, direction any) error {
	newKey, ok := removedKeys[key]
	if !ok {
		return nil
	}
	// The old keys were already the least improvement in the metric's
	// direction, for both directions: the equivalent is the same figure.
	per := ""
	if key == "relative" {
		per = ", divided by |baseline|"
	}
	msg := fmt.Sprintf("metric %s: %q is no longer accepted: its meaning differed from TFX's for lower_is_better metrics. "+
		"Write %s: %s (the least improvement of %s over the baseline%s, in its direction; negative allows that much worse)",
		metric, key, newKey, settingText(value), metric, per)
	// A lower_is_better threshold copied from TFX meant the opposite sign:
	// there it is the most the metric may rise.
	if f, err := number.Figure(value); err == nil && f != 0 && direction == string(LowerIsBetter) {
		msg += fmt.Sprintf(". If the value was copied from a TFX config, where a lower_is_better threshold is the most "+
			"the metric may rise over the baseline, write %s: %s instead", newKey, Number(-f))
	}
	return fmt.Errorf("%w: %s", ErrInvalidConfig, msg)
}

// RemovedKeys returns a [RemovedKeyError] for each removed key in checks, a
// metric's map of checks as a spec holds it, in key order; nil when there
// is none or checks is not a map. It reads the keys only, so a validator
// can call it on a metric whose values are references, which
// [ParseConfig] cannot check before a run.
func RemovedKeys(metric string, checks any) error {
	m, ok := asMap(checks)
	if !ok {
		return nil
	}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(m)) {
		errs = append(errs, RemovedKeyError(metric, k, m[k], m["direction"]))
	}
	return errors.Join(errs...)
}

// settingText writes a threshold's value as a spec would: a figure in its
// shortest form, a reference or other text as it is.
func settingText(v any) string {
	if f, err := number.Figure(v); err == nil {
		return Number(f).String()
	}
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return x
	}
	return fmt.Sprint(v)
}
