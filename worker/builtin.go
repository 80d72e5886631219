package worker

import (
	"fmt"
	"log/slog"

	canarynode "github.com/retrain-ml/retrain/activities/canary"
	"github.com/retrain-ml/retrain/activities/checkpoint"
	"github.com/retrain-ml/retrain/activities/command"
	"github.com/retrain-ml/retrain/activities/evaluate"
	"github.com/retrain-ml/retrain/activities/gate"
	lakenode "github.com/retrain-ml/retrain/activities/lake"
	"github.com/retrain-ml/retrain/activities/models"
	"github.com/retrain-ml/retrain/activities/noop"
	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/activities/train"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/gpu"
	"github.com/retrain-ml/retrain/internal/approval"
	"github.com/retrain-ml/retrain/internal/gang"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/nodetype"
)

// deps are what the built-in node types need from the worker process.
type deps struct {
	Logger *slog.Logger
	// Lake is the Iceberg catalog the lake nodes use, opened on first use;
	// nil on a worker without one (those nodes then fail as bad input).
	Lake *lake.Lazy
	// Store holds checkpoints and the model registry; nil on a worker
	// without one (those nodes then fail as bad input). The worker opens
	// it at startup, so an unreachable store stops the worker there.
	Store *s3store.Store
	// GPUs leases this worker's healthy GPUs to train nodes, and
	// GPUMonitor samples their utilization; both nil without GPUs.
	GPUs       *gpu.Allocator
	GPUMonitor gpu.UtilizationReader
	// AllowCommands are the programs steps may start (the worker's
	// --allow-commands); empty allows any.
	AllowCommands []string
	// Env is what programs see of the worker and where local paths may
	// lie (the worker's --pass-env, --secrets-dir and --allow-paths).
	Env progenv.Policy
	// Host is the worker as a host of training gangs, and Hosts lists a
	// queue's live hosts (host.go).
	Host  train.Host
	Hosts train.HostDirectory
	// Limits bound the ranks per host and hosts a train node may ask of
	// this worker (--max-processes-per-host, --max-hosts).
	Limits gang.Limits
}

// builtin returns every node type retrain ships, each from its package
// under nodes/. It is the one list of them: the validator, the CLI and the
// worker all read it, and a new built-in type is one more line here.
func builtin(d deps) []nodetype.Type {
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	var types []nodetype.Type
	types = append(types, command.TypeWith(command.Deps{Logger: d.Logger, AllowCommands: d.AllowCommands, Env: d.Env}), noop.Type())
	types = append(types, lakenode.Types(lakenode.Deps{Catalog: d.Lake, Logger: d.Logger, Store: d.Store, SecretsDir: d.Env.SecretsDir})...)
	types = append(types, checkpoint.TypeWith(checkpoint.Deps{Store: d.Store, Logger: d.Logger, AllowCommands: d.AllowCommands, Env: d.Env}))
	types = append(types, models.TypesWith(models.Deps{Store: d.Store, Logger: d.Logger, Env: d.Env})...)
	types = append(types, split.Type(split.Deps{Catalog: d.Lake, Store: d.Store, Logger: d.Logger, Env: d.Env}))
	types = append(types, train.Type(train.Deps{Store: d.Store, Logger: d.Logger, GPUs: d.GPUs, Monitor: d.GPUMonitor, AllowCommands: d.AllowCommands, Env: d.Env, Host: d.Host, Hosts: d.Hosts, Limits: d.Limits}))
	types = append(types, evaluate.TypeWith(evaluate.Deps{Store: d.Store, Logger: d.Logger, AllowCommands: d.AllowCommands, Env: d.Env}))
	types = append(types, gate.TypesWith(d.Store, approval.Approvers{SecretsDir: d.Env.SecretsDir})...)
	types = append(types, canarynode.Type(&canarynode.Activities{
		Models: &models.Models{Store: d.Store, Logger: d.Logger, Env: d.Env}, Logger: d.Logger,
	}))
	return types
}

// Types returns the registry of the built-in node types, for validating
// specs without a worker (`retrain dag validate`).
func Types() *dags.Registry {
	reg, err := registryOf(builtin(deps{}))
	if err != nil {
		panic(fmt.Sprintf("worker: built-in node types: %v", err)) // a programming error, caught by tests
	}
	return reg
}
