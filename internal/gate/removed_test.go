package gate

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestRemovedKeysMessages: the old keys are refused, for either direction,
// with the text that says why and what to write instead.
func TestRemovedKeysMessages(t *testing.T) {
	cases := []struct {
		name   string
		checks map[string]any
		want   string // the whole message after "invalid gate config: "
	}{
		{"absolute, higher_is_better", map[string]any{"direction": "higher_is_better", "absolute": -0.01},
			`metric auc: "absolute" is no longer accepted: its meaning differed from TFX's for lower_is_better metrics. ` +
				`Write min_absolute_change: -0.01 (the least improvement of auc over the baseline, in its direction; negative allows that much worse)`},
		{"relative, higher_is_better", map[string]any{"direction": "higher_is_better", "relative": 0.02},
			`metric auc: "relative" is no longer accepted: its meaning differed from TFX's for lower_is_better metrics. ` +
				`Write min_relative_change: 0.02 (the least improvement of auc over the baseline, divided by |baseline|, in its direction; negative allows that much worse)`},
		{"absolute, lower_is_better", map[string]any{"direction": "lower_is_better", "absolute": -1},
			`metric auc: "absolute" is no longer accepted: its meaning differed from TFX's for lower_is_better metrics. ` +
				`Write min_absolute_change: -1 (the least improvement of auc over the baseline, in its direction; negative allows that much worse). ` +
				`If the value was copied from a TFX config, where a lower_is_better threshold is the most the metric may rise over the baseline, write min_absolute_change: 1 instead`},
		{"relative, lower_is_better", map[string]any{"direction": "lower_is_better", "relative": "-0.02"},
			`metric auc: "relative" is no longer accepted: its meaning differed from TFX's for lower_is_better metrics. ` +
				`Write min_relative_change: -0.02 (the least improvement of auc over the baseline, divided by |baseline|, in its direction; negative allows that much worse). ` +
				`If the value was copied from a TFX config, where a lower_is_better threshold is the most the metric may rise over the baseline, write min_relative_change: 0.02 instead`},
		{"zero reads the same in TFX", map[string]any{"direction": "lower_is_better", "absolute": 0},
			`metric auc: "absolute" is no longer accepted: its meaning differed from TFX's for lower_is_better metrics. ` +
				`Write min_absolute_change: 0 (the least improvement of auc over the baseline, in its direction; negative allows that much worse)`},
		{"a reference is repeated as written", map[string]any{"direction": "lower_is_better", "absolute": "${params.tol}"},
			`metric auc: "absolute" is no longer accepted: its meaning differed from TFX's for lower_is_better metrics. ` +
				`Write min_absolute_change: ${params.tol} (the least improvement of auc over the baseline, in its direction; negative allows that much worse)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig(map[string]any{"metrics": map[string]any{"auc": tc.checks}})
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("ParseConfig = %v, want ErrInvalidConfig", err)
			}
			if got := strings.TrimPrefix(err.Error(), ErrInvalidConfig.Error()+": "); got != tc.want {
				t.Errorf("error\n%s\nwant\n%s", got, tc.want)
			}
			// The validator's walk over the keys says the same.
			if err2 := RemovedKeys("auc", tc.checks); err2 == nil || err2.Error() != err.Error() {
				t.Errorf("RemovedKeys = %v", err2)
			}
		})
	}
}

// TestRemovedKeysWithOthers: the removed key is reported with the metric's
// other problems, and not again as "no checks" or as an unknown key.
func TestRemovedKeysWithOthers(t *testing.T) {
	_, err := ParseConfig(map[string]any{"metrics": map[string]any{
		"auc":  map[string]any{"absolute": 0.1, "relative": 0.2},
		"loss": map[string]any{"direction": "lower_is_better", "max": 1, "min": 2},
	}})
	msg := fmt.Sprint(err)
	for _, want := range []string{`metric auc: "absolute" is no longer accepted`, `metric auc: "relative" is no longer accepted`,
		"Write min_absolute_change: 0.1", "Write min_relative_change: 0.2", "metrics.loss: min 2 is greater than max 1"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	for _, not := range []string{"unknown key", "no checks", "If the value was copied"} {
		if strings.Contains(msg, not) {
			t.Errorf("error %q says %q", msg, not)
		}
	}
	if RemovedKeys("auc", map[string]any{"min": 0.1, "min_absolute_change": 0}) != nil || RemovedKeys("auc", "${x}") != nil {
		t.Error("RemovedKeys refused keys that are not removed")
	}
}

// settingRe reads the settings an error suggests: the first is the old
// key's meaning here, the second ("instead") TFX's.
var settingRe = regexp.MustCompile(`(?:Write|write) (min_(?:absolute|relative)_change): (-?[0-9.e+-]+)`)

// TestRemovedKeysEquivalent: the setting each error suggests decides every
// case as the old key did here (the least improvement in the metric's
// direction, by the rule of the code that read it), and for
// lower_is_better the "copied from TFX" setting decides as TFX's rule
// (candidate - baseline <= threshold; relative: divided by the baseline)
// does.
func TestRemovedKeysEquivalent(t *testing.T) {
	// oldRule is what "absolute"/"relative" meant before they were
	// removed: improvement = diff for higher_is_better, -diff for
	// lower_is_better, passing when improvement >= threshold.
	oldRule := func(dir Direction, relative bool, c, b, th float64) bool {
		diff := c - b
		if relative {
			diff /= math.Abs(b)
		}
		if dir == LowerIsBetter {
			diff = -diff
		}
		return diff >= th
	}
	tfxLower := func(relative bool, c, b, th float64) bool {
		diff := c - b
		if relative {
			diff /= b
		}
		return diff <= th
	}
	figures := []float64{0.2, 0.5, 0.75, 0.8, 1, 1.5, 3}
	for _, dir := range []Direction{HigherIsBetter, LowerIsBetter} {
		for _, key := range []string{"absolute", "relative"} {
			for _, th := range []float64{-0.5, -0.25, 0, 0.25, 0.5} {
				err := RemovedKeyError("m", key, th, string(dir))
				found := settingRe.FindAllStringSubmatch(err.Error(), -1)
				wantFound := 2
				if dir == HigherIsBetter || th == 0 {
					wantFound = 1 // TFX reads a higher_is_better threshold (and 0) as here
				}
				if len(found) != wantFound {
					t.Fatalf("%s %s %v: settings %q in %v", dir, key, th, found, err)
				}
				for i, f := range found {
					v, perr := strconv.ParseFloat(f[2], 64)
					if perr != nil {
						t.Fatal(perr)
					}
					cfg, perr := ParseConfig(map[string]any{"metrics": map[string]any{"m": map[string]any{"direction": string(dir), f[1]: v}}})
					if perr != nil {
						t.Fatalf("suggested %s: %v: %v", f[0], v, perr)
					}
					for _, c := range figures {
						for _, b := range figures {
							r := eval1(t, cfg, val(c), &side{v: b})
							want := oldRule(dir, key == "relative", c, b, th)
							if i == 1 {
								want = tfxLower(key == "relative", c, b, th)
							}
							if r.Passed != want {
								t.Errorf("%s %s: %v (suggestion %d) with candidate %v, baseline %v: passed %v, the old rule says %v",
									dir, key, th, i, c, b, r.Passed, want)
							}
						}
					}
				}
			}
		}
	}
}
