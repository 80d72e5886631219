package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	canarynode "github.com/retrain-ml/retrain/activities/canary"
	"github.com/retrain-ml/retrain/internal/canary"
	"github.com/retrain-ml/retrain/runs"
)

// TestCanarySection draws a rolled-back canary: its banner, its steps and
// each check's series with the threshold and the breach.
func TestCanarySection(t *testing.T) {
	t0 := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	f := func(v float64) *float64 { return &v }
	rel := -0.05
	var ctrPts []canary.Sample
	for i, c := range []float64{0.1, 0.099, 0.07} {
		ctrPts = append(ctrPts, canary.Sample{Time: t0.Add(time.Duration(2*(i+1)) * time.Second), Canary: f(c), Production: f(0.1), Count: f(500)})
	}
	out := canarynode.Outputs{
		Decision: canarynode.RolledBack, DecidedBy: "checks", Reason: "check ctr breached at step 2 (50% of traffic): <b>worse</b>",
		Model: "ctr", Version: "v2", Ref: "ctr@v2", Alias: "canary", ProductionAlias: "production", PreviousVersion: "v1",
		Steps: []canarynode.StepRecord{
			{Percent: 10, Bake: "4s", Started: t0, Ended: t0.Add(4 * time.Second), Outcome: "passed",
				Checks: []canarynode.CheckRecord{{Name: "ctr", Status: "pass", Canary: f(0.099), Production: f(0.1), Samples: 2, Passed: 2}}},
			{Percent: 50, Bake: "4s", Started: t0.Add(4 * time.Second), Ended: t0.Add(6 * time.Second), Outcome: "breached",
				Checks: []canarynode.CheckRecord{{Name: "ctr", Status: "breach", Canary: f(0.07), Production: f(0.1), Samples: 1}}},
		},
		Series: []canarynode.Series{{Check: "ctr", Query: `ctr{version="v2"}`, ProductionQuery: `ctr{version="v1"}`,
			Threshold: "min_relative_change -0.05 (higher_is_better)", Relative: &rel, Direction: "higher_is_better",
			Points: ctrPts, Steps: []int{0, 0, 1}}},
		Breach: &canarynode.BreachRecord{Check: "ctr", Step: 2, Percent: 50, Reason: "relative improvement -0.3 is below minimum -0.05"},
	}
	b, _ := json.Marshal(out)
	var outputs map[string]any
	_ = json.Unmarshal(b, &outputs)
	res := &runs.Result{ID: "r1", Pipeline: "ctr-canary", Status: runs.StatusFailed, StartedAt: t0, Error: "node canary: x",
		Nodes: []runs.NodeState{{ID: "canary", Type: "canary", Status: runs.NodeFailed, Error: "x", Outputs: outputs}}}
	var page bytes.Buffer
	if err := Write(&page, &Report{Result: res}, Options{}); err != nil {
		t.Fatal(err)
	}
	html := page.String()
	for _, want := range []string{
		"Canary rolled back", "production stays at v1", "Canary: rolled back", "&lt;b&gt;worse&lt;/b&gt;",
		"breached at step 2", `ctr{version=&#34;v1&#34;}`, "threshold: min_relative_change -0.05", `stroke="#c62828"`, ">50%<",
	} {
		if !strings.Contains(html, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// The threshold at the last sample: production 0.1 less 5%.
	if y, ok := thresholdAt(out.Series[0], ctrPts[2]); !ok || y < 0.0949 || y > 0.0951 {
		t.Errorf("threshold at the breach %v, want 0.095", y)
	}
}
