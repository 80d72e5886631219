package activities

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/gpu"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/internal/s3store"
)

// Deps are what the steps need from the worker process.
type Deps struct {
	Logger *slog.Logger
	// Lake is the Iceberg catalog the lake steps use, opened on first use;
	// nil on a worker without one (those steps then fail as bad input).
	Lake *lake.Lazy
	// Store holds checkpoints and the model registry; nil on a worker
	// without one (those steps then fail as bad input). The worker opens
	// it at startup, so an unreachable store stops the worker there.
	Store *s3store.Store
	// GPUs leases this worker's healthy GPUs to train nodes, and
	// GPUMonitor samples their utilization; both nil without GPUs.
	GPUs       *gpu.Allocator
	GPUMonitor gpu.UtilizationReader
}

func (d Deps) logger() *slog.Logger {
	if d.Logger == nil {
		return slog.Default()
	}
	return d.Logger
}

// Steps returns every node type retrain knows with its implementation. It is
// the one place a new node type is added; the interpreter never changes.
func Steps(deps Deps) []Step {
	deps.Logger = deps.logger()
	cmd := &Command{Logger: deps.Logger}
	lk := &Lake{Catalog: deps.Lake, Logger: deps.Logger}
	ms := &Models{Store: deps.Store, Logger: deps.Logger}
	cp := &Checkpoints{Store: deps.Store, Logger: deps.Logger}
	sp := &Splits{Catalog: deps.Lake, Store: deps.Store, Logger: deps.Logger}
	tr := &Trainers{Store: deps.Store, Logger: deps.Logger, GPUs: deps.GPUs, Monitor: deps.GPUMonitor}
	ev := &Evaluator{Store: deps.Store, Logger: deps.Logger}
	return []Step{
		{Type: CommandType, Run: cmd.Run},
		{Type: NoopType, Run: noop},
		{Type: StageFeaturesType, Run: lk.Stage},
		{Type: FeatureStatsType, Run: lk.Stats},
		{Type: PromoteFeaturesType}, // a child workflow: workflows.PromoteFeatures
		{Type: RollbackTableType, Run: lk.Rollback},
		{Type: CheckpointType, Run: cp.Run},
		{Type: DeployType, Run: ms.Deploy},
		{Type: RollbackModelType, Run: ms.RollbackModel},
		{Type: SplitType, Run: sp.Run},
		{Type: TrainType, Run: tr.Run},
		{Type: EvaluateType, Run: ev.Run},
		{Type: GateType}, // a child workflow: workflows.Gate
	}
}

// Types returns the registry of node types, for validation without a worker.
func Types() *dags.Registry {
	steps := Steps(Deps{})
	types := make([]dags.NodeType, len(steps))
	for i, s := range steps {
		types[i] = s.Type
	}
	reg, err := dags.NewRegistry(types...)
	if err != nil {
		panic(fmt.Sprintf("activities: built-in node types: %v", err)) // a programming error, caught by tests
	}
	return reg
}

// NoopType is the `noop` node type: it does nothing and outputs its `with`
// block, which makes it useful as a join point and for passing values on.
var NoopType = dags.NodeType{
	Name:     "noop",
	Doc:      "Does nothing; outputs its `with` values unchanged (a join point, or a place to name values).",
	OpenWith: true,
}

func noop(_ context.Context, in NodeInput) (map[string]any, error) {
	return in.With, nil
}
