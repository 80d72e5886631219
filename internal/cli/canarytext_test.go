package cli

import (
	"testing"
	"time"

	canarynode "github.com/retrain-ml/retrain/activities/canary"
)

func TestCanaryText(t *testing.T) {
	now := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	st := canarynode.State{Phase: "baking", Step: 2, Steps: 3, Percent: 25, Version: "v2", BakeEnds: now.Add(40 * time.Second),
		Checks: []canarynode.CheckRecord{{Name: "ctr", Status: "pass"}, {Name: "p99_latency", Status: "waiting"}}}
	if got, want := CanaryText(st, now), "canary v2: step 2/3 at 25%, bake 40s left; ctr pass, p99_latency waiting"; got != want {
		t.Errorf("CanaryText = %q, want %q", got, want)
	}
}
