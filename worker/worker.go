// Package worker runs retrain's Temporal workers: the Pipeline workflow and
// every node type's activity on the default task queue and, when asked, the
// activities alone on a GPU task queue.
package worker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	lakenode "github.com/retrain-ml/retrain/activities/lake"
	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/activities/readiness"
	"github.com/retrain-ml/retrain/activities/train"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/gpu"
	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/internal/storage"
	"github.com/retrain-ml/retrain/nodetype"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/workflows"
)

// Default task queue names. The default queue is the one runs.Start sends
// runs to.
const (
	DefaultTaskQueue = runs.DefaultTaskQueue
	DefaultGPUQueue  = "retrain-gpu"
)

// Config says what a worker process polls and how much it runs at once.
type Config struct {
	TaskQueue string
	GPUQueue  string
	GPU       bool // also poll GPUQueue; needs a healthy GPU
	// MaxConcurrentActivities bounds activities running at once on the
	// default queue (0 = the SDK default, 1000). Bounded activities (the
	// groups of promote_features and split) run from queues of their own
	// and are not counted against it: ActivityConcurrency bounds them.
	MaxConcurrentActivities int
	// ActivityConcurrency bounds, per bounded activity type (or per node
	// type, for all of its bounded activities), how many run at once on
	// this worker; unset ones get GOMAXPROCS (bounded.go).
	ActivityConcurrency map[string]int
	// GPUSlots bounds activities running at once on the GPU queue; 0
	// means one per healthy GPU, and more than that is capped to it.
	GPUSlots int
	// OpenGPUs opens the host's GPUs. The binary passes NVML's
	// (gpu/nvmlhost) when it links it; nil means it does not, and --gpu
	// fails with gpu.ErrNoNVML. Tests inject go-nvml's mocks or fakes.
	OpenGPUs func() (GPUHost, error)
	// MaxConcurrentWorkflowTasks bounds workflow tasks (0 = SDK default).
	MaxConcurrentWorkflowTasks int
	// PipelinesDir is the folder of YAML pipelines runs may name. When
	// empty, Pipelines is used (retrain dev embeds the examples).
	PipelinesDir string
	Pipelines    fs.FS
	// Lake is the Iceberg catalog of the lake steps (opened on first use).
	Lake lake.Config
	// Store is where checkpoints and models live. When configured it is
	// opened, and checked, by New: a worker that cannot reach it does not
	// start.
	Store storage.Config
	// ReportURL is where runs' HTML reports are served, with {run} in
	// place of the run id (`retrain dev` serves them and sets it). Runs
	// link to it from their details in the Web UI.
	ReportURL string
	// MetricsAddr is where the worker serves Prometheus metrics at
	// /metrics (HOST:PORT); empty serves none.
	MetricsAddr string
	// AllowInlineSpecs lets runs bring their own spec instead of naming a
	// pipeline from PipelinesDir or Pipelines. Off, a client that may
	// start workflows can only run the operator's pipelines; the dev
	// stack turns it on (`retrain run FILE`).
	AllowInlineSpecs bool
	// TrustedQueues are the task queues whose Pipeline runs may run nodes
	// on this worker (guard.go); empty means TaskQueue alone. A node that
	// a run on any other queue sends here is refused: that run was
	// resolved by workers whose policy this one does not know.
	TrustedQueues []string
	// AllowCommands lists the programs command nodes, command trainers
	// and evaluators and checkpoint commands may start: a bare name
	// matches that program anywhere, an absolute path only that file.
	// Empty allows any program.
	AllowCommands []string
	// Env is what programs that steps start see of the worker (the
	// variables passed on, secrets) and where local paths may lie
	// (env.go).
	Env progenv.Policy
	// Host is the worker as a host of multi-host training (host.go).
	Host HostConfig
	// PeerScanInterval is how often the worker looks for workers of its
	// queue that run under another policy (peers.go); 0 means 15 s.
	PeerScanInterval time.Duration
}

// Environment variables that default the policy flags.
const (
	EnvAllowInlineSpecs = "RETRAIN_ALLOW_INLINE_SPECS"
	EnvAllowCommands    = "RETRAIN_ALLOW_COMMANDS"
	EnvTrustedQueues    = "RETRAIN_TRUSTED_QUEUES"
)

// AddFlags registers the worker flags.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.TaskQueue, "task-queue", DefaultTaskQueue, "task queue for pipelines and CPU steps")
	fs.StringVar(&c.GPUQueue, "gpu-queue", DefaultGPUQueue, "task queue for GPU steps")
	fs.BoolVar(&c.GPU, "gpu", false, "also poll the GPU task queue")
	fs.IntVar(&c.GPUSlots, "gpu-slots", 0, "GPU steps run at once on this worker (default: one per healthy GPU)")
	fs.IntVar(&c.MaxConcurrentActivities, "max-concurrent-activities", 0, "steps run at once on the default queue (0 = SDK default)")
	fs.StringToIntVar(&c.ActivityConcurrency, "activity-concurrency", nil,
		"TYPE=N: at most N activities of the bounded activity TYPE at once on this worker, e.g. SplitGroup=2,PromoteFeaturesBuckets=4, or a node type for all of its own (split=2); repeatable. "+
			"Bounded activities (the bucket groups of split and promote_features) are polled from TASK_QUEUE/TYPE, so a group waits on the server for any worker with a free slot; default: GOMAXPROCS each")
	fs.IntVar(&c.MaxConcurrentWorkflowTasks, "max-concurrent-workflow-tasks", 0, "workflow tasks run at once (0 = SDK default)")
	fs.StringVar(&c.PipelinesDir, "pipelines", os.Getenv("RETRAIN_PIPELINES"), "folder of pipeline YAML files that runs may name (env RETRAIN_PIPELINES)")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", os.Getenv("RETRAIN_METRICS_ADDR"), "serve Prometheus metrics at http://HOST:PORT/metrics (env RETRAIN_METRICS_ADDR)")
	fs.StringVar(&c.ReportURL, "report-url", os.Getenv("RETRAIN_REPORT_URL"), "URL of a run's HTML report, {run} standing for the run id, linked from the Web UI (env RETRAIN_REPORT_URL)")
	allowInline, _ := strconv.ParseBool(os.Getenv(EnvAllowInlineSpecs))
	fs.BoolVar(&c.AllowInlineSpecs, "allow-inline-specs", allowInline,
		"accept runs that send their own spec; without it runs may only name a pipeline from --pipelines (env "+EnvAllowInlineSpecs+")")
	var allowCommands []string
	if v := os.Getenv(EnvAllowCommands); v != "" {
		allowCommands = strings.Split(v, ",")
	}
	fs.StringSliceVar(&c.AllowCommands, "allow-commands", allowCommands,
		"programs that command, trainer, evaluator and checkpoint steps may start, by name or absolute path, e.g. sh,python3,/usr/bin/python3; empty: any (env "+EnvAllowCommands+")")
	fs.StringSliceVar(&c.TrustedQueues, "trusted-queues", splitEnv(EnvTrustedQueues),
		"task queues whose pipeline runs may run nodes on this worker (default: --task-queue); nodes sent by runs on other queues are refused (env "+EnvTrustedQueues+")")
	addEnvFlags(fs, &c.Env)
	c.Host.addFlags(fs)
	c.Lake.AddFlags(fs)
	c.Store.AddFlags(fs) // after the lake's: they share --s3-endpoint and --s3-region
}

// Worker is a running set of Temporal workers.
type Worker struct {
	workers   []sdkworker.Worker
	peers     *peerWatch
	stopPeers context.CancelFunc
	logger    *slog.Logger
	lake      *lake.Lazy
	gpus      GPUHost // nil without --gpu
	metrics   *workerMetrics
}

// New registers the Pipeline workflow, the resolver and every node type,
// the built-in ones and any given WithNodeTypes. It checks the namespace
// has retrain's search attributes (adding them if it may) so runs can be
// filtered by pipeline in the UI.
func New(ctx context.Context, c client.Client, namespace string, cfg Config, logger *slog.Logger, opts ...Option) (*Worker, error) {
	if logger == nil {
		logger = slog.Default()
	}
	if cfg.TaskQueue == "" {
		cfg.TaskQueue = DefaultTaskQueue
	}
	if err := checkReportURL(cfg.ReportURL); err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	// Custom types are checked before anything is opened: a name clash is
	// a programming error in this binary, not a reason to touch NVML.
	custom, err := customTypes(o.nodeTypes)
	if err != nil {
		return nil, err
	}
	var lib *dags.Library
	switch {
	case cfg.PipelinesDir != "":
		st, err := os.Stat(cfg.PipelinesDir)
		if err != nil || !st.IsDir() {
			return nil, fmt.Errorf("pipelines folder %q: not a readable directory", cfg.PipelinesDir)
		}
		lib = dags.NewLibrary(os.DirFS(cfg.PipelinesDir))
	case cfg.Pipelines != nil:
		lib = dags.NewLibrary(cfg.Pipelines)
	}
	host, err := cfg.Host.resolve(logger)
	if err != nil {
		return nil, err
	}
	// GPUs first: a GPU worker without a usable GPU must not start at all,
	// or it would take GPU jobs it cannot run.
	var (
		gpus     GPUHost
		gpuSlots int
	)
	if cfg.GPU {
		if gpus, gpuSlots, err = openGPUs(cfg, logger); err != nil {
			return nil, err
		}
		if cfg.GPUQueue == "" {
			closeGPUs(gpus, logger)
			return nil, errors.New("--gpu needs a GPU queue name")
		}
	}

	var leases *gpu.Allocator
	if gpus != nil {
		leases = gpu.NewAllocator(gpus, gpu.ByUUID)
	}
	// Metrics before the store, which counts its S3 retries into them.
	met, err := newWorkerMetrics(c, namespace, cfg.MetricsAddr, logger, gpus, leases)
	if err != nil {
		closeGPUs(gpus, logger)
		return nil, err
	}
	cfg.Store.S3.OnRetry = met.countS3Retries(cfg.Store.S3.OnRetry)
	cfg.Lake.S3.OnRetry = met.countS3Retries(cfg.Lake.S3.OnRetry) // an S3 warehouse's table IO
	cfg.Store.S3.OnRequest = met.countS3Requests(cfg.Store.S3.OnRequest)
	cfg.Lake.S3.OnRequest = met.countS3Requests(cfg.Lake.S3.OnRequest)
	store, err := openStore(ctx, cfg.Store, logger)
	if err != nil {
		met.stop()
		closeGPUs(gpus, logger)
		return nil, err
	}
	limits, err := cfg.Host.limits(runtime.NumCPU(), healthyGPUs(gpus))
	if err != nil {
		met.stop()
		closeGPUs(gpus, logger)
		return nil, err
	}
	d := deps{Logger: logger, Lake: lake.NewLazy(cfg.Lake, logger.With("component", "lake")), Store: store, AllowCommands: cfg.AllowCommands, Env: cfg.Env,
		Host: host, Hosts: hostDirectory(c, namespace), Limits: limits}
	if gpus != nil {
		d.GPUs = leases
		d.GPUMonitor = gpus
	}
	types := append(builtin(d), custom...)
	bounded, err := boundedActivities(types, cfg.ActivityConcurrency)
	if err != nil {
		met.stop()
		closeGPUs(gpus, logger)
		return nil, err
	}
	// The resolver validates against the types this worker runs, so a spec
	// is accepted exactly when every node has an activity here.
	reg, err := registryOf(types)
	if err != nil {
		met.stop()
		closeGPUs(gpus, logger)
		return nil, err
	}
	attrs := EnsureSearchAttributes(ctx, c, namespace, logger)
	trusted := cfg.TrustedQueues
	if len(trusted) == 0 {
		trusted = []string{cfg.TaskQueue}
	}
	self := identity(host.ID)
	pol := policyOf(cfg, trusted, types)
	peers := newPeerWatch(c, namespace, cfg.TaskQueue, self, host.ID, pol, cfg.PeerScanInterval, logger)
	logger.Info("this worker's policy, which the other workers of its task queue compare theirs with", "queue", cfg.TaskQueue, "policy", pol.digest())
	resolver := &workflows.Resolver{
		Library:             lib,
		Registry:            reg,
		SearchAttributes:    attrs.Pipeline,
		RunSearchAttributes: attrs.Run,
		ReportURL:           cfg.ReportURL,
		AllowInlineSpecs:    cfg.AllowInlineSpecs,
		Worker:              self,
		Disagreement:        peers.disagreement,
	}
	if !cfg.AllowInlineSpecs {
		logger.Info("runs may only name a pipeline from this worker's folder; inline specs are refused (--allow-inline-specs accepts them)")
	}
	if len(cfg.AllowCommands) > 0 {
		logger.Info("steps may start only the allowed programs", "allow_commands", strings.Join(cfg.AllowCommands, ","))
	}

	// The guard comes first, so that nothing else (metrics included) sees
	// an execution it refuses; the notes on refusals next, so that they
	// see the node's error as it returns.
	g := newGuard(c, trusted, workflowTypes(types), logger)
	g.identity, g.peers = self, peers
	interceptors := append([]interceptor.WorkerInterceptor{g, &policyNotes{identity: self, watch: peers}}, met.interceptors(childNodeTypes(types))...)
	main := sdkworker.New(met.clientOr(c), cfg.TaskQueue, sdkworker.Options{
		Identity:                               self,
		MaxConcurrentActivityExecutionSize:     cfg.MaxConcurrentActivities,
		MaxConcurrentWorkflowTaskExecutionSize: cfg.MaxConcurrentWorkflowTasks,
		MaxHeartbeatThrottleInterval:           heartbeatThrottle,
		Interceptors:                           interceptors,
	})
	workflows.Register(main)
	main.RegisterActivityWithOptions(resolver.Resolve, activity.RegisterOptions{Name: runs.ResolveActivity})
	verifier := &reuseVerifier{types: map[string]nodetype.Type{}, store: d.Store, lake: d.Lake, logger: logger}
	for _, t := range types {
		verifier.types[t.NodeType.Name] = t
	}
	main.RegisterActivityWithOptions(verifier.Verify, activity.RegisterOptions{Name: runs.VerifyReuseActivity})
	main.RegisterActivityWithOptions(rerunLoader{c: c}.Load, activity.RegisterOptions{Name: runs.LoadReuseActivity})
	// wait_for checks run where the run's workflow does, under the same
	// guard and the worker's lake, store and allow lists.
	checker := &readiness.Checker{Lake: d.Lake, Store: d.Store, AllowCommands: d.AllowCommands, Env: d.Env, Logger: logger.With("component", "readiness")}
	main.RegisterActivityWithOptions(checker.Check, activity.RegisterOptions{Name: runs.ReadinessActivity})
	registerTypes(main, types, true)
	cache := newNodeCache(store, types, self, logger.With("component", "nodecache"))
	registerCache(main, cache)
	w := &Worker{workers: []sdkworker.Worker{main}, peers: peers, logger: logger, lake: d.Lake, gpus: gpus, metrics: met}
	w.workers = append(w.workers, policyWorker(met.clientOr(c), cfg.TaskQueue, self, pol, interceptors[:1]))
	w.workers = append(w.workers, boundedWorkers(met.clientOr(c), cfg.TaskQueue, identity(host.ID), bounded, interceptors, logger)...)
	w.workers = append(w.workers, hostWorker(met.clientOr(c), cfg.TaskQueue, host, types, interceptors, logger))

	if cfg.GPU {
		gw := sdkworker.New(met.clientOr(c), cfg.GPUQueue, sdkworker.Options{
			Identity:                           identity(host.ID),
			MaxConcurrentActivityExecutionSize: gpuSlots,
			MaxHeartbeatThrottleInterval:       heartbeatThrottle,
			Interceptors:                       interceptors,
		})
		registerTypes(gw, types, false)
		registerCache(gw, cache)
		w.workers = append(w.workers, gw, hostWorker(met.clientOr(c), cfg.GPUQueue, host, types, interceptors, logger))
		logger.Info("polling the GPU queue", "queue", cfg.GPUQueue, "slots", gpuSlots)
	}
	return w, nil
}

// heartbeatThrottle is the longest the SDK holds a heartbeat back from the
// server. Its default, 0.8 of the heartbeat timeout (24 s for a 30 s one),
// leaves a 20 s training step showing step 1 of 1,382 until it ends: the
// progress a heartbeat carries is what `status --follow`, the Web UI and
// the report draw. Nodes heartbeat progress only, so 5 s costs a server
// call per running node every 5 s at most.
const heartbeatThrottle = 5 * time.Second

// openStore opens the object store if one is configured, so that a wrong
// endpoint or bad credentials stop the worker at startup rather than fail
// its first checkpoint or deploy. It also asks the server to expire old
// checkpoints; servers without lifecycle rules leave that to `retrain gc`.
func openStore(ctx context.Context, cfg storage.Config, logger *slog.Logger) (*s3store.Store, error) {
	store, err := storage.Open(ctx, cfg, logger.With("component", "s3"))
	if errors.Is(err, storage.ErrNotConfigured) {
		logger.Info("no object store configured; checkpoint, deploy and rollback_model steps will fail")
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("object store for checkpoints and models: %w", err)
	}
	if cfg.RetentionDays > 0 {
		if _, err := checkpoint.SetRetention(ctx, store, cfg.RetentionDays); err != nil {
			logger.Warn("cannot set checkpoint expiration; run `retrain gc` to expire checkpoints", "error", err)
		}
	}
	logger.Info("object store ready", "uri", store.URI().String())
	return store, nil
}

// checkReportURL accepts an empty template or an absolute http(s) URL
// holding {run}.
func checkReportURL(template string) error {
	if template == "" {
		return nil
	}
	u, err := url.Parse(strings.ReplaceAll(template, "{run}", "RUN"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--report-url %q: want an http(s) URL such as http://host:8234/runs/{run}", template)
	}
	if !strings.Contains(template, "{run}") {
		return fmt.Errorf("--report-url %q: has no {run} where the run id goes", template)
	}
	return nil
}

// workflowTypes are the workflow types a worker of these node types
// registers: the ones whose activities the guard accepts.
func workflowTypes(types []nodetype.Type) []string {
	names := []string{runs.PipelineWorkflow, workflows.ForeachChunkWorkflow}
	for _, t := range types {
		if t.NodeType.Kind == dags.KindWorkflow {
			names = append(names, t.TargetName())
		}
		names = append(names, slices.Sorted(maps.Keys(t.Workflows))...)
	}
	return names
}

// registerTypes registers each node type's activity on w, and on the main
// worker (withWorkflows) the child workflows of the types that have one and
// the activities those schedule. GPU workers poll activities only. The
// activities a type runs on a chosen host (Hosted) are the host worker's.
func registerTypes(w sdkworker.Worker, types []nodetype.Type, withWorkflows bool) {
	for _, t := range types {
		if t.NodeType.Kind == dags.KindWorkflow {
			if withWorkflows {
				w.RegisterWorkflowWithOptions(t.Workflow, workflow.RegisterOptions{Name: t.TargetName()})
				registerActivities(w, t)
				if t.TargetName() == lakenode.PromoteWorkflow {
					// The queue promotions into one table take turns in.
					w.RegisterWorkflowWithOptions(lakenode.TableQueue, workflow.RegisterOptions{Name: lakenode.TableQueueWorkflow})
				}
			}
			continue
		}
		w.RegisterActivityWithOptions(instrumented(t.NodeType.Name, nodetype.Activity(t.Run)), activity.RegisterOptions{Name: t.TargetName()})
		if withWorkflows {
			for name, wf := range t.Workflows {
				w.RegisterWorkflowWithOptions(wf, workflow.RegisterOptions{Name: name})
			}
		}
		// An activity type's other activities serve its workflows, which
		// schedule them on the node's queue: the GPU queue's too.
		registerActivities(w, t)
	}
}

// registerActivities registers t's Activities but the hosted ones.
func registerActivities(w sdkworker.Worker, t nodetype.Type) {
	for name, fn := range t.Activities {
		if !slices.Contains(t.Hosted, name) {
			w.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
		}
	}
}

// hostWorker polls queue's host queue for this worker's host
// (nodetype.HostQueue): the hosted activities of types, which a workflow
// sends to the host it chose (a training gang's leases and ranks). It
// runs with the guard, as every worker of nodes does.
func hostWorker(c client.Client, queue string, host train.Host, types []nodetype.Type, interceptors []interceptor.WorkerInterceptor, logger *slog.Logger) sdkworker.Worker {
	q := nodetype.HostQueue(queue, host.ID)
	w := sdkworker.New(c, q, sdkworker.Options{
		Identity:                     identity(host.ID),
		MaxHeartbeatThrottleInterval: heartbeatThrottle,
		Interceptors:                 interceptors,
		DisableWorkflowWorker:        true,
	})
	for _, t := range types {
		for _, name := range t.Hosted {
			w.RegisterActivityWithOptions(t.Activities[name], activity.RegisterOptions{Name: name})
		}
	}
	logger.Info("polling this host's queue for multi-host training", "queue", q, "address", host.Address, "interface", host.Interface)
	return w
}

// Start starts polling.
func (w *Worker) Start() error {
	if err := w.metrics.start(); err != nil {
		return err
	}
	for i, sw := range w.workers {
		if err := sw.Start(); err != nil {
			for _, started := range w.workers[:i] {
				started.Stop()
			}
			w.metrics.stop()
			return fmt.Errorf("start worker: %w", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.stopPeers = cancel
	go w.peers.run(ctx)
	return nil
}

// Stop stops polling and waits for running activities to return.
func (w *Worker) Stop() {
	if w.stopPeers != nil {
		w.stopPeers()
	}
	for _, sw := range w.workers {
		sw.Stop()
	}
	if err := w.lake.Close(); err != nil {
		w.logger.Warn("close lake catalog", "error", err)
	}
	w.metrics.stop()
	closeGPUs(w.gpus, w.logger)
}

// MetricsAddr is the address metrics are served on once started ("" when
// MetricsAddr was not configured): with port 0 configured, the port picked.
func (w *Worker) MetricsAddr() string { return w.metrics.Addr() }

// Run polls until ctx is done.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.Start(); err != nil {
		return err
	}
	<-ctx.Done()
	w.Stop()
	return nil
}
