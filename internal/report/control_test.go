package report

import (
	"strings"
	"testing"
)

// A feature experiment's gate compares with its control: the report says
// so, rather than naming a registry version "control".
func TestGateBaselineControl(t *testing.T) {
	got := gateBaseline(map[string]any{"baseline_version": "control", "has_baseline": true, "baseline_source": "given"})
	if !strings.HasPrefix(got, "Baseline: the control") || !strings.Contains(got, "lift") {
		t.Errorf("gateBaseline = %q", got)
	}
	if got := gateBaseline(map[string]any{"baseline_version": "v3", "has_baseline": true}); got != "Baseline: v3." {
		t.Errorf("gateBaseline(v3) = %q", got)
	}
}
