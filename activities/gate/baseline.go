package gate

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/activities/internal/objects"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/nodetype"
)

// BaselineActivity is the activity a gate schedules to read a baseline's
// metrics from the model registry (baseline: {model, alias}).
const BaselineActivity = "gate.registry_baseline"

// RegistryRef is a baseline given as a registry alias: the metrics
// recorded with the version the alias names. It is for pipelines that do
// not score production on the run's rows (a team's own scripts, no
// Iceberg split); the verdict says where the figures came from.
type RegistryRef struct {
	Model string `json:"model"`
	Alias string `json:"alias"`
}

// registryRef reads baseline as {model: NAME, alias: ALIAS}: a map whose
// keys are model (a string) and optionally alias, and nothing else. A map
// of metric figures is never one (a figure is not a model name).
func registryRef(baseline any) (RegistryRef, bool) {
	m, ok := baseline.(map[string]any)
	if !ok {
		return RegistryRef{}, false
	}
	model, ok := m["model"].(string)
	if !ok {
		return RegistryRef{}, false
	}
	for k := range m {
		if k != "model" && k != "alias" {
			return RegistryRef{}, false
		}
	}
	ref := RegistryRef{Model: model, Alias: models.DefaultAlias}
	if a, ok := m["alias"]; ok {
		s, isString := a.(string)
		if !isString {
			return RegistryRef{}, false
		}
		ref.Alias = s
	}
	return ref, true
}

// checkRegistryRef checks the names of a literal registry baseline.
func checkRegistryRef(ref RegistryRef) error {
	if err := models.ValidateName("baseline.model", ref.Model); err != nil {
		return err
	}
	return models.ValidateName("baseline.alias", ref.Alias)
}

// RegistryBaseline is what the registry holds for a baseline alias.
type RegistryBaseline struct {
	Found       bool               `json:"found"` // false: the alias names no version yet
	Model       string             `json:"model"`
	Alias       string             `json:"alias"`
	Version     string             `json:"version"`
	Metrics     map[string]float64 `json:"metrics"`
	LogicalDate string             `json:"logical_date"` // of the data the version was trained for
	Run         string             `json:"run"`          // the run that registered it
}

// Baselines reads baselines from a worker's model registry.
type Baselines struct {
	Store *s3store.Store // nil: no object store configured
}

// Read is BaselineActivity.
func (b *Baselines) Read(ctx context.Context, ref RegistryRef) (RegistryBaseline, error) {
	if b.Store == nil {
		return RegistryBaseline{}, objects.NoStore()
	}
	if err := checkRegistryRef(ref); err != nil {
		return RegistryBaseline{}, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	out := RegistryBaseline{Model: ref.Model, Alias: ref.Alias}
	v, err := models.New(b.Store).Resolve(ctx, ref.Model+"@"+ref.Alias)
	if errors.Is(err, models.ErrNotFound) {
		return out, nil // no production model yet: the gate's no_baseline rule
	}
	if err != nil {
		return RegistryBaseline{}, fmt.Errorf("baseline %s@%s: %w", ref.Model, ref.Alias, err)
	}
	out.Found, out.Version, out.Metrics = true, v.Version, v.Metrics
	out.LogicalDate, out.Run = v.LogicalDate(), v.PipelineRun
	if len(out.Metrics) == 0 {
		return RegistryBaseline{}, nodetype.Permanent(errtype.BadInput,
			"baseline %s (%s of %s) was registered without metrics: deploy records them from its metrics field", v.Ref(), ref.Alias, ref.Model)
	}
	return out, nil
}

// resolveRegistryBaseline replaces a {model, alias} baseline in with by
// the metrics the registry recorded with that version, read by an
// activity (the registry is object storage), and returns it; with is left
// alone when its baseline is not such a reference.
func resolveRegistryBaseline(ctx workflow.Context, in nodetype.Input) (map[string]any, *RegistryBaseline, error) {
	ref, ok := registryRef(in.With["baseline"])
	if !ok {
		return in.With, nil, nil
	}
	opts := workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 5},
	}
	if o := in.Options; o != nil {
		opts.RetryPolicy = nodetype.RetryPolicy(o.Retry)
		if o.Timeout > 0 {
			opts.StartToCloseTimeout = min(o.Timeout, opts.StartToCloseTimeout)
		}
	}
	var rb RegistryBaseline
	if err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), BaselineActivity, ref).Get(ctx, &rb); err != nil {
		return nil, nil, err
	}
	with := maps.Clone(in.With)
	delete(with, "baseline")
	if rb.Found {
		metrics := make(map[string]any, len(rb.Metrics))
		for _, k := range slices.Sorted(maps.Keys(rb.Metrics)) {
			metrics[k] = rb.Metrics[k]
		}
		with["baseline"] = metrics
		with["baseline_version"] = rb.Version
	}
	return with, &rb, nil
}
