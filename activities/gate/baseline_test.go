package gate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/nodetype"
)

// registerVersion registers a one-file version of ctr with meta and points
// production at it.
func registerVersion(t *testing.T, reg *models.Registry, content string, meta models.Meta) models.Version {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "model.bin")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := reg.Register(t.Context(), "ctr", models.Artifacts{"model.bin": p}, "", meta)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Promote(t.Context(), "ctr", "production", v.Version, models.Actor{Name: "test"}, "setup"); err != nil {
		t.Fatal(err)
	}
	return v
}

// runGate runs the Gate workflow as a child of a run would, with the
// registry baseline activity on store.
func runGate(t *testing.T, store *s3store.Store, with map[string]any) (Outputs, error) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(nodetest.Quiet))
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(Gate)
	env.RegisterActivityWithOptions((&Baselines{Store: store}).Read, activity.RegisterOptions{Name: BaselineActivity})
	env.ExecuteWorkflow(Gate, nodetype.Input{Pipeline: "p", RunID: "r", Node: "gate", Type: Name, With: with})
	var res nodetype.Result
	if err := env.GetWorkflowResult(&res); err != nil {
		return Outputs{}, err
	}
	var out Outputs
	err := nodetype.Decode(res.Outputs, &out)
	return out, err
}

// TestGateBaselineFromRegistry: a pipeline without an evaluate node (a
// team's own scripts) compares its candidate with production's recorded
// metrics, and the verdict says where they came from.
func TestGateBaselineFromRegistry(t *testing.T) {
	store := s3test.Start(t).Open(t, "reg")
	gateOn := func(auc float64) map[string]any {
		return map[string]any{
			"metrics":   map[string]any{"auc": map[string]any{"direction": "higher_is_better", "min": 0.6, "min_absolute_change": -0.005}},
			"candidate": map[string]any{"auc": auc},
			"baseline":  map[string]any{"model": "ctr", "alias": "production"},
		}
	}

	// No production model yet: the no_baseline rule (value_only) applies.
	out, err := runGate(t, store, gateOn(0.7))
	if err != nil || !out.Passed || out.HasBaseline || out.BaselineSource != "" {
		t.Fatalf("no production yet: %+v, %v", out, err)
	}

	v := registerVersion(t, models.New(store), "v1", models.Meta{
		Metrics: map[string]float64{"auc": 0.75}, LogicalTime: "2026-11-14T00:00:00Z", PipelineRun: "nightly-2026-11-14",
	})
	out, err = runGate(t, store, gateOn(0.74))
	if err != nil {
		t.Fatal(err)
	}
	if out.Passed || !out.HasBaseline || out.BaselineVersion != v.Version || out.BaselineSource != "registry ctr@"+v.Version ||
		out.BaselineLogicalDate != "2026-11-14" {
		t.Fatalf("0.74 against production's 0.75: %+v", out)
	}
	for _, want := range []string{"recorded with ctr@" + v.Version, "trained for 2026-11-14", "not scored on this run's rows"} {
		if !strings.Contains(out.Reason, want) {
			t.Errorf("reason %q lacks %q", out.Reason, want)
		}
	}
	if out, err := runGate(t, store, gateOn(0.746)); err != nil || !out.Passed {
		t.Fatalf("0.746 is within 0.005 of 0.75: %+v, %v", out, err)
	}
	// alias defaults to production.
	w := gateOn(0.8)
	w["baseline"] = map[string]any{"model": "ctr"}
	if out, err := runGate(t, store, w); err != nil || out.BaselineVersion != v.Version {
		t.Fatalf("default alias: %+v, %v", out, err)
	}

	// A version registered without metrics cannot be a baseline: a clear
	// error, not a silent pass.
	registerVersion(t, models.New(store), "v2", models.Meta{})
	_, err = runGate(t, store, gateOn(0.8))
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != errtype.BadInput || !strings.Contains(err.Error(), "registered without metrics") {
		t.Fatalf("baseline without metrics: %v", err)
	}
}

func TestRegistryBaselineValidated(t *testing.T) {
	for _, tt := range []struct{ with, want string }{
		{`
      candidate: {auc: 0.8}
      baseline: {model: ctr, alias: production}
      metrics: {auc: {min: 0.7}}`, ""},
		{`
      candidate: {auc: 0.8}
      baseline: {model: "${params.late}"}
      metrics: {auc: {min: 0.7}}`, ""},
		{`
      candidate: {auc: 0.8}
      baseline: {model: ctr, alias: production}
      baseline_version: v3
      metrics: {auc: {min: 0.7}}`, "baseline_version goes with a baseline map"},
		{`
      candidate: {auc: 0.8}
      baseline: {model: "bad name!"}
      metrics: {auc: {min: 0.7}}`, "baseline.model"},
		{`
      candidate: {auc: 0.8}
      baseline: {auc: high}
      metrics: {auc: {min: 0.7}}`, "baseline.auc"},
	} {
		err := gateSpec(t, tt.with)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: rejected: %v", tt.with, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: error %v, want one about %q", tt.with, err, tt.want)
		}
	}
}
