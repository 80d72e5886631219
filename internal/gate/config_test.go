package gate

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestParseConfigExample(t *testing.T) {
	// The shape a YAML decoder produces for the package doc's example.
	with := map[string]any{
		"metrics": map[string]any{
			"auc":     map[string]any{"direction": "higher_is_better", "min": 0.7, "min_absolute_change": -0.002},
			"logloss": map[string]any{"direction": "lower_is_better", "min_relative_change": -0.01},
		},
		"no_baseline":   "value_only",
		"zero_baseline": "fail",
	}
	got, err := ParseConfig(with)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Metrics: map[string]Threshold{
			"auc":     {Direction: HigherIsBetter, Min: new(0.7), MinAbsoluteChange: new(-0.002)},
			"logloss": {Direction: LowerIsBetter, MinRelativeChange: new(-0.01)},
		},
		NoBaseline:   NoBaselineValueOnly,
		ZeroBaseline: ZeroBaselineFail,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

func TestParseConfigNumberTypes(t *testing.T) {
	cases := []struct {
		in   any
		want float64
	}{
		{0.5, 0.5}, {float32(0.5), 0.5}, {1, 1}, {int64(-2), -2}, {uint8(3), 3}, {uint64(4), 4},
		{json.Number("0.25"), 0.25}, {"0.125", 0.125}, {" 1e-3 ", 0.001},
	}
	for _, tc := range cases {
		cfg, err := ParseConfig(map[string]any{"metrics": map[string]any{"m": map[string]any{"min": tc.in}}})
		if err != nil {
			t.Errorf("%T %v: %v", tc.in, tc.in, err)
			continue
		}
		if got := *cfg.Metrics["m"].Min; got != tc.want {
			t.Errorf("%T %v: got %v, want %v", tc.in, tc.in, got, tc.want)
		}
	}
}

func TestParseConfigYAMLv2Maps(t *testing.T) {
	// gopkg.in/yaml.v2 and some JSON-to-YAML paths decode maps as
	// map[any]any.
	with := map[string]any{"metrics": map[any]any{"auc": map[any]any{"min": 0.7}}}
	cfg, err := ParseConfig(with)
	if err != nil {
		t.Fatal(err)
	}
	if *cfg.Metrics["auc"].Min != 0.7 {
		t.Errorf("got %+v", cfg)
	}
	if _, err := ParseConfig(map[string]any{"metrics": map[any]any{1: map[string]any{"min": 0.7}}}); err == nil {
		t.Error("non-string metric name accepted")
	}
}

func TestParseConfigErrors(t *testing.T) {
	m := func(checks map[string]any) map[string]any {
		return map[string]any{"metrics": map[string]any{"auc": checks}}
	}
	cases := []struct {
		name string
		with map[string]any
		want []string // substrings, all of which must appear
	}{
		{"nil with", nil, []string{"no thresholds configured"}},
		{"empty with", map[string]any{}, []string{"no thresholds configured"}},
		{"empty metrics", map[string]any{"metrics": map[string]any{}}, []string{"no thresholds configured"}},
		{"metrics not a map", map[string]any{"metrics": []any{"auc"}}, []string{"metrics: want a map", "a list"}},
		{"unknown top-level key", map[string]any{"metrics": map[string]any{"auc": map[string]any{"min": 0.5}}, "no_baselin": "block"}, []string{`unknown key "no_baselin"`}},
		{"typo and no metrics", map[string]any{"no_baselin": "block"}, []string{`unknown key "no_baselin"`, "no thresholds configured"}},
		{"no_baseline not a string", map[string]any{"metrics": map[string]any{"auc": map[string]any{"min": 0.5}}, "no_baseline": true}, []string{"no_baseline: want a string, got bool true"}},
		{"zero_baseline not a string", map[string]any{"metrics": map[string]any{"auc": map[string]any{"min": 0.5}}, "zero_baseline": 0}, []string{"zero_baseline: want a string, got int"}},
		{"unknown no_baseline", map[string]any{"metrics": map[string]any{"auc": map[string]any{"min": 0.5}}, "no_baseline": "allow"}, []string{`no_baseline: unknown mode "allow"`}},
		{"unknown zero_baseline", map[string]any{"metrics": map[string]any{"auc": map[string]any{"min": 0.5}}, "zero_baseline": "skip"}, []string{`zero_baseline: unknown mode "skip"`}},
		{"metric with nothing", map[string]any{"metrics": map[string]any{"auc": nil}}, []string{"metrics.auc: no checks"}},
		{"metric with no checks", m(map[string]any{"direction": "higher_is_better"}), []string{"metrics.auc: no checks"}},
		{"metric not a map", m(nil), []string{"metrics.auc: no checks"}},
		{"metric a number", map[string]any{"metrics": map[string]any{"auc": 0.7}}, []string{"metrics.auc: want a map of checks, got float64"}},
		{"unknown metric key", m(map[string]any{"min": 0.5, "relatve": 0.1}), []string{`metrics.auc: unknown key "relatve"`}},
		{"min not a number", m(map[string]any{"min": "high"}), []string{`metrics.auc.min: want a number, got "high"`}},
		{"max a bool", m(map[string]any{"max": true}), []string{"metrics.auc.max: want a number, got bool true"}},
		{"absolute a list", m(map[string]any{"direction": "higher_is_better", "min_absolute_change": []any{1}}), []string{"metrics.auc.min_absolute_change: want a number, got a list"}},
		{"NaN string", m(map[string]any{"min": "NaN"}), []string{`metrics.auc.min: "NaN" is not a finite number`}},
		{"null threshold", m(map[string]any{"min": nil}), []string{"metrics.auc.min: want a number, got null"}},
		{"hex text", m(map[string]any{"min": "0x1p-1"}), []string{`metrics.auc.min: want a number, got "0x1p-1"`}},
		{"NaN float", m(map[string]any{"min": math.NaN()}), []string{"metrics.auc.min: NaN is not a finite number"}},
		{"Inf float", m(map[string]any{"max": math.Inf(1)}), []string{"metrics.auc.max: +Inf is not a finite number"}},
		{"-Inf relative", m(map[string]any{"direction": "lower_is_better", "min_relative_change": math.Inf(-1)}), []string{"metrics.auc.min_relative_change: -Inf is not a finite number"}},
		{"out of range", m(map[string]any{"min": "1e999"}), []string{`metrics.auc.min: "1e999" is out of range`}},
		{"direction not a string", m(map[string]any{"direction": 1, "min": 0.5}), []string{"metrics.auc.direction: want a string, got int"}},
		{"unknown direction", m(map[string]any{"direction": "up", "min": 0.5}), []string{`metrics.auc.direction: unknown direction "up"`}},
		{"missing direction with absolute", m(map[string]any{"min_absolute_change": 0.1}), []string{"metrics.auc.direction: required with min_absolute_change or min_relative_change"}},
		{"missing direction with relative", m(map[string]any{"min_relative_change": 0.1}), []string{"metrics.auc.direction: required"}},
		{"min above max", m(map[string]any{"min": 0.9, "max": 0.8}), []string{"metrics.auc: min 0.9 is greater than max 0.8"}},
		{"block with no change threshold", map[string]any{"metrics": map[string]any{"auc": map[string]any{"min": 0.5}}, "no_baseline": "block"}, []string{"no_baseline: block has no effect"}},
		{"several problems at once", map[string]any{"metrics": map[string]any{
			"auc":     map[string]any{"min": 0.9, "max": 0.8},
			"logloss": map[string]any{"min_relative_change": 0.1, "bogus": 1},
		}}, []string{"metrics.auc: min 0.9 is greater than max 0.8", `metrics.logloss: unknown key "bogus"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseConfig(tc.with)
			if err == nil {
				t.Fatalf("ParseConfig succeeded: %+v", cfg)
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("error does not wrap ErrInvalidConfig: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestValidate(t *testing.T) {
	valid := []Config{
		one(Threshold{Min: new(0.5)}),
		one(Threshold{Max: new(0.5)}),
		one(Threshold{Min: new(0.5), Max: new(0.5)}),
		// A direction with only value bounds is allowed (informational).
		one(Threshold{Direction: LowerIsBetter, Max: new(0.5)}),
		one(Threshold{Direction: HigherIsBetter, MinAbsoluteChange: new(0.0)}),
		one(Threshold{Direction: LowerIsBetter, MinRelativeChange: new(-0.5)}),
		{Metrics: map[string]Threshold{"m": {Direction: HigherIsBetter, MinAbsoluteChange: new(0.0)}}, NoBaseline: NoBaselineBlock},
		{Metrics: map[string]Threshold{"m": {Min: new(0.5)}}, NoBaseline: NoBaselineBless, ZeroBaseline: ZeroBaselineSkipRelative},
	}
	for _, cfg := range valid {
		if err := cfg.Validate(); err != nil {
			t.Errorf("Validate(%+v): %v", cfg, err)
		}
	}
	invalid := map[string]Config{
		"no metrics":           {},
		"empty metric name":    {Metrics: map[string]Threshold{" ": {Min: new(0.5)}}},
		"no checks":            one(Threshold{Direction: HigherIsBetter}),
		"missing direction":    one(Threshold{MinAbsoluteChange: new(0.1)}),
		"unknown direction":    one(Threshold{Direction: "HIGHER_IS_BETTER", MinAbsoluteChange: new(0.1)}),
		"min > max":            one(Threshold{Min: new(1.0), Max: new(0.0)}),
		"NaN threshold":        one(Threshold{Direction: HigherIsBetter, MinAbsoluteChange: new(math.NaN())}),
		"unknown no_baseline":  {Metrics: map[string]Threshold{"m": {Min: new(0.5)}}, NoBaseline: "skip"},
		"unknown zero_base":    {Metrics: map[string]Threshold{"m": {Min: new(0.5)}}, ZeroBaseline: "pass"},
		"block without change": {Metrics: map[string]Threshold{"m": {Min: new(0.5)}}, NoBaseline: NoBaselineBlock},
	}
	for name, cfg := range invalid {
		if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: Validate = %v, want ErrInvalidConfig", name, err)
		}
	}
}

func TestConfigJSONRoundTrip(t *testing.T) {
	cfg := Config{
		Metrics:    map[string]Threshold{"auc": {Direction: HigherIsBetter, Min: new(0.7), MinAbsoluteChange: new(-0.002)}},
		NoBaseline: NoBaselineBless,
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var with map[string]any
	if err := json.Unmarshal(b, &with); err != nil {
		t.Fatal(err)
	}
	// What a config marshals to is what ParseConfig reads back.
	got, err := ParseConfig(with)
	if err != nil {
		t.Fatalf("ParseConfig(%s): %v", b, err)
	}
	if !reflect.DeepEqual(got, cfg) {
		t.Errorf("got %+v, want %+v", got, cfg)
	}
}
