package number

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		v any
		f float64
	}{
		{int(3), 3}, {int8(-3), -3}, {int16(3), 3}, {int32(3), 3}, {int64(3), 3},
		{uint(3), 3}, {uint8(3), 3}, {uint16(3), 3}, {uint32(3), 3}, {uint64(3), 3},
		{float32(2.5), 2.5}, {4.0, 4}, {json.Number("7.5"), 7.5}, {uint64(1 << 63), 1 << 63},
	} {
		if f, ok := Of(tc.v); !ok || f != tc.f {
			t.Errorf("Of(%T %v) = %v, %v; want %v", tc.v, tc.v, f, ok, tc.f)
		}
	}
	if f, ok := Of(math.NaN()); !ok || !math.IsNaN(f) {
		t.Errorf("Of(NaN) = %v, %v: a Go NaN is a number; callers check finiteness", f, ok)
	}
	// Text is not a number to Of: a spec's "1" and 1 are different types.
	for _, v := range []any{"1", true, nil, []any{}, map[string]any{}, json.Number("x")} {
		if f, ok := Of(v); ok {
			t.Errorf("Of(%#v) = %v, true", v, f)
		}
	}
}

func TestText(t *testing.T) {
	for s, want := range map[string]float64{
		"0.81": 0.81, "-3": -3, "+2": 2, "1e-3": 1e-3, ".5": 0.5, "5.": 5, " 2\n": 2, "1E3": 1000,
	} {
		if f, err := Text(s); err != nil || f != want {
			t.Errorf("Text(%q) = %v, %v; want %v", s, f, err, want)
		}
	}
	for s, msg := range map[string]string{
		"":       `want a number, got ""`,
		"high":   `want a number, got "high"`,
		"0x1p-2": `want a number, got "0x1p-2"`,
		"1_000":  `want a number, got "1_000"`,
		"1,5":    `want a number, got "1,5"`,
		"NaN":    `"NaN" is not a finite number`,
		"nan":    `"nan" is not a finite number`,
		"-Inf":   `"-Inf" is not a finite number`,
		"1e999":  `"1e999" is out of range`,
	} {
		if f, err := Text(s); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("Text(%q) = %v, %v; want an error containing %q", s, f, err, msg)
		}
	}
}

// TestFigure: null is NaN (a missing metric fails its checks), numbers and
// numeric text are numbers, anything else is an error naming what it got.
func TestFigure(t *testing.T) {
	if f, err := Figure(nil); err != nil || !math.IsNaN(f) {
		t.Errorf("Figure(nil) = %v, %v; want NaN", f, err)
	}
	for _, tc := range []struct {
		v    any
		want float64
	}{{0.7, 0.7}, {int64(2), 2}, {json.Number("0.25"), 0.25}, {"0.9\n", 0.9}} {
		if f, err := Figure(tc.v); err != nil || f != tc.want {
			t.Errorf("Figure(%#v) = %v, %v; want %v", tc.v, f, err, tc.want)
		}
	}
	for _, tc := range []struct {
		v   any
		msg string
	}{
		{true, "want a number, got bool true"},
		{[]any{1}, "want a number, got a list"},
		{map[string]any{}, "want a number, got a map"},
		{"NaN", `"NaN" is not a finite number`},
		{"auc", `want a number, got "auc"`},
	} {
		if f, err := Figure(tc.v); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("Figure(%#v) = %v, %v; want an error containing %q", tc.v, f, err, tc.msg)
		}
	}
}
