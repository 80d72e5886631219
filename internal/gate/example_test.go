package gate_test

import (
	"fmt"

	"github.com/retrain-ml/retrain/internal/gate"
)

func Example() {
	// The `with` block of a gate node, as the YAML decoder hands it over.
	cfg, err := gate.ParseConfig(map[string]any{
		"metrics": map[string]any{
			"auc":     map[string]any{"direction": "higher_is_better", "min": 0.7, "min_absolute_change": -0.002},
			"logloss": map[string]any{"direction": "lower_is_better", "min_relative_change": -0.01},
		},
	})
	if err != nil {
		panic(err)
	}
	r, err := gate.Evaluate(cfg,
		gate.Candidate{ID: "run-7", Metrics: map[string]float64{"auc": 0.7985, "logloss": 0.412}},
		&gate.Baseline{Version: "3", Metrics: map[string]float64{"auc": 0.8, "logloss": 0.41}})
	if err != nil {
		panic(err)
	}
	for _, c := range r.Comparisons {
		fmt.Printf("%-7s %-19s passed=%-5v %s\n", c.Metric, c.Check, c.Passed, c.Reason)
	}
	fmt.Println("gate passed:", r.Passed)
	// Output:
	// auc     value_min           passed=true  auc 0.7985 >= min 0.7
	// auc     min_absolute_change passed=true  auc improvement -0.0015 >= minimum -0.002 (higher_is_better)
	// logloss min_relative_change passed=true  logloss relative improvement -0.00487805 >= minimum -0.01 (lower_is_better)
	// gate passed: true
}
