// Package number reads numbers out of decoded values: what YAML and JSON
// decoders, Temporal payloads and ${...} templating hand over as any. It is
// the one place that decides what counts as a number, so that a spec's
// conditions, a gate's thresholds and the metrics a gate or deploy node is
// given all agree.
//
// The rule:
//   - a Go number (any int, uint or float kind) or a json.Number is its
//     value, NaN and ±Inf included: callers that need a finite figure check;
//   - a string holding a decimal number ("0.81", "-3", "1e-3", " 2\n") is
//     that number, since templating yields text and stdout ends in a
//     newline; "NaN", "Inf", hex and digit separators are not numbers in
//     text, so a typo never reads as a figure;
//   - null is NaN for a figure (Figure): a metric the evaluator could not
//     compute fails every check on it instead of passing one;
//   - anything else (a bool, a list, a map) is not a number.
package number

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// Of returns v as a float64 when v is a Go number or a json.Number. It does
// not read strings: callers that tell a number from text use it (a spec's
// types, formatting, conditions).
func Of(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case int:
		return float64(x), true
	case int8:
		return float64(x), true
	case int16:
		return float64(x), true
	case int32:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint:
		return float64(x), true
	case uint8:
		return float64(x), true
	case uint16:
		return float64(x), true
	case uint32:
		return float64(x), true
	case uint64:
		return float64(x), true
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		return f, err == nil
	}
	return 0, false
}

var decimalRe = regexp.MustCompile(`^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$`)

// Text parses s, surrounding space ignored, as a decimal number. Its errors
// say what is wrong: not a number, a non-finite word ("NaN", "Inf"), or out
// of float64's range.
func Text(s string) (float64, error) {
	t := strings.TrimSpace(s)
	if !decimalRe.MatchString(t) {
		if f, err := strconv.ParseFloat(t, 64); err == nil && (math.IsNaN(f) || math.IsInf(f, 0)) {
			return 0, fmt.Errorf("%q is not a finite number", s)
		}
		return 0, fmt.Errorf("want a number, got %q", s)
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	return f, nil
}

// Figure reads a figure given by a user or by another node's outputs: a
// number, or a numeric string, by the package's rule; null is NaN.
func Figure(v any) (float64, error) {
	switch x := v.(type) {
	case nil:
		return math.NaN(), nil
	case string:
		return Text(x)
	}
	if f, ok := Of(v); ok {
		return f, nil
	}
	return 0, fmt.Errorf("want a number, got %s", describe(v))
}

// describe names a value that is not a number by its JSON type.
func describe(v any) string {
	switch x := v.(type) {
	case bool:
		return fmt.Sprintf("bool %v", x)
	case []any, []string:
		return "a list"
	case map[string]any, map[any]any, map[string]string:
		return "a map"
	}
	return fmt.Sprintf("%T", v)
}
