package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	canarynode "github.com/retrain-ml/retrain/activities/canary"
	"github.com/retrain-ml/retrain/activities/gate"
	"github.com/retrain-ml/retrain/activities/models"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/gpu"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/metrics"
	"github.com/retrain-ml/retrain/nodetype"
	"github.com/retrain-ml/retrain/runs"
)

// Retrain's own metrics. They are recorded through the SDK's metrics
// handler (activity.GetMetricsHandler, workflow.GetMetricsHandler), so they
// carry its tags (namespace, task_queue, activity_type, workflow_type) and
// the workflow-side ones are skipped while a history replays: counting in
// workflow code this way stays deterministic. Timers are exported as
// histograms named NAME_seconds.
const (
	MetricRuns           = "retrain_runs_total"              // counter: pipeline, status (succeeded, failed, cancelled)
	MetricNodeDuration   = "retrain_node_duration"           // timer: node_type, status (ok, failed, cancelled)
	MetricNodeAttempts   = "retrain_node_attempts_total"     // counter: node_type, status; one per activity attempt
	MetricNodeRetries    = "retrain_node_retries_total"      // counter: node_type; attempts after the first
	MetricGateDecisions  = "retrain_gate_decisions_total"    // counter: decision (passed, rejected, approved)
	MetricDeploys        = "retrain_deploys_total"           // counter: status
	MetricRollbacks      = "retrain_rollbacks_total"         // counter: status
	MetricGPUUtilization = "retrain_gpu_utilization_percent" // gauge: gpu (UUID)
	MetricGPUsLeased     = "retrain_gpus_leased"             // gauge
	// MetricCacheLookups counts the node cache's lookups: node_type,
	// result (hit, miss, skipped: --no-cache or --refresh).
	MetricCacheLookups = "retrain_node_cache_lookups_total"
)

// MetricScheduledGate counts the gate verdicts of runs that schedules
// started: pipeline, schedule, verdict (passed, rejected, undecided:
// no gate, or it did not decide). A run whose gate rejects ends
// succeeded (on_reject: skip) and ships nothing; rejections with no
// pass in a window are a nightly that never ships (docs/alerts.yaml).
const MetricScheduledGate = "retrain_scheduled_gate_verdicts_total"

// MetricDataWait is recorded by the Pipeline workflow when a wait for
// data (wait_for) ends: pipeline, outcome (ready, not_ready).
const MetricDataWait = runs.MetricDataWait

// MetricCanaryDecisions is counted by the canary workflow itself, when it
// decides: decision (promoted, approved, rolled_back, rejected, refused).
const MetricCanaryDecisions = canarynode.MetricDecisions

// metricsHelp is the HELP text of retrain's metrics as exported.
var metricsHelp = map[string]string{
	MetricRuns:                      "Pipeline runs finished, by pipeline and status.",
	MetricNodeDuration + "_seconds": "Duration of node activity attempts, by node type and status.",
	MetricNodeAttempts:              "Node activity attempts, by node type and status.",
	MetricNodeRetries:               "Node activity attempts after the first, by node type.",
	MetricGateDecisions:             "Gate decisions: passed, rejected, or approved (a rejected candidate forced through).",
	MetricScheduledGate:             "Gate verdicts of scheduled runs, by pipeline, schedule and verdict (passed, rejected, undecided).",
	MetricDeploys:                   "Deploy node attempts, by status.",
	MetricCanaryDecisions:           "Canary deploy decisions: promoted, approved, rolled_back, rejected, refused (production moved meanwhile).",
	MetricRollbacks:                 "rollback_model node attempts, by status.",
	MetricGPUUtilization:            "GPU utilization in percent from NVML, by GPU UUID (GPU workers only).",
	MetricGPUsLeased:                "GPUs currently leased to running steps (GPU workers only).",
	MetricDataWait + "_seconds":     "How long runs (or nodes) waited for their data (wait_for), by pipeline and outcome (ready, not_ready).",
	MetricCacheLookups:              "Node cache lookups of nodes marked cache:, by node type and result (hit, miss, skipped).",
	metrics.S3Retries:               metrics.S3RetriesHelp,
	metrics.S3Requests:              metrics.S3RequestsHelp,
	metrics.S3Bytes:                 metrics.S3BytesHelp,
}

// ExportedMetrics lists retrain's metric names as scraped (timers with
// _seconds): the dashboard and alert rules may use these, their
// histogram series (_bucket, _sum, _count) and the SDK's temporal_*.
func ExportedMetrics() []string {
	names := make([]string, 0, len(metricsHelp))
	for n := range metricsHelp {
		names = append(names, n)
	}
	return names
}

// workerMetrics serves the worker's metrics when --metrics-addr is set;
// nil otherwise, and every method is then a no-op.
type workerMetrics struct {
	addr   string
	reg    *metrics.Registry
	client client.Client // c with the metrics handler; closed by stop
	gpus   GPUHost
	leases *gpu.Allocator
	logger *slog.Logger

	srv     *metrics.Server
	cancel  context.CancelFunc
	done    chan struct{}
	stopped bool // stop is idempotent: Start's failure path and Stop both call it
}

// newWorkerMetrics derives from c a client reporting SDK metrics into a
// Prometheus registry (same connection; the SDK takes its handler from
// the client a worker is built on). addr "" means no metrics.
func newWorkerMetrics(c client.Client, namespace, addr string, logger *slog.Logger, gpus GPUHost, leases *gpu.Allocator) (*workerMetrics, error) {
	if addr == "" {
		return nil, nil
	}
	reg := metrics.NewRegistry(metricsHelp)
	mc, err := client.NewClientFromExisting(c, client.Options{
		Namespace:      namespace,
		MetricsHandler: reg.Handler(),
		Logger:         sdklog.NewStructuredLogger(logger),
	})
	if err != nil {
		return nil, fmt.Errorf("client with metrics: %w", err)
	}
	return &workerMetrics{addr: addr, reg: reg, client: mc, gpus: gpus, leases: leases, logger: logger}, nil
}

// countS3Retries returns the object store's retry hook: next (the
// caller's, may be nil) and, when metrics are served, one more in
// retrain_s3_retries_total.
func (m *workerMetrics) countS3Retries(next func(s3store.RetryEvent)) func(s3store.RetryEvent) {
	if m == nil {
		return next
	}
	return func(ev s3store.RetryEvent) {
		m.reg.CountS3Retry(ev.Operation, ev.Reason)
		if next != nil {
			next(ev)
		}
	}
}

// countS3Requests returns the object store's request hook: next (the
// caller's, may be nil) and, when metrics are served, one more in
// retrain_s3_requests_total and retrain_s3_bytes_total.
func (m *workerMetrics) countS3Requests(next func(s3store.RequestEvent)) func(s3store.RequestEvent) {
	if m == nil {
		return next
	}
	return func(ev s3store.RequestEvent) {
		m.reg.CountS3Request(ev.Operation, ev.NodeType, ev.Bytes)
		if next != nil {
			next(ev)
		}
	}
}

// clientOr is the client workers are built on.
func (m *workerMetrics) clientOr(c client.Client) client.Client {
	if m == nil {
		return c
	}
	return m.client
}

// interceptors count runs and gate decisions when the workflows finish.
func (m *workerMetrics) interceptors(children map[string]string) []interceptor.WorkerInterceptor {
	if m == nil {
		return nil
	}
	return []interceptor.WorkerInterceptor{&outcomeInterceptor{children: children}}
}

// childNodeTypes maps the child workflow types of types to their node
// types: nodes whose attempts the workflow interceptor counts (an
// activity node's are counted by its activity, see instrumented).
func childNodeTypes(types []nodetype.Type) map[string]string {
	m := map[string]string{}
	for _, t := range types {
		if t.NodeType.Kind == dags.KindWorkflow {
			m[t.TargetName()] = t.NodeType.Name
		}
		for name := range t.Workflows {
			m[name] = t.NodeType.Name
		}
	}
	return m
}

// start serves /metrics and samples the GPUs.
func (m *workerMetrics) start() error {
	if m == nil {
		return nil
	}
	srv, err := metrics.Listen(m.addr, m.reg, m.logger)
	if err != nil {
		return err
	}
	m.srv = srv
	m.logger.Info("serving metrics", "url", "http://"+srv.Addr()+"/metrics")
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel, m.done = cancel, make(chan struct{})
	go m.sampleGPUs(ctx, m.reg.Handler(), 15*time.Second)
	return nil
}

func (m *workerMetrics) stop() {
	if m == nil || m.stopped {
		return
	}
	m.stopped = true
	if m.srv != nil {
		m.cancel()
		<-m.done
		if err := m.srv.Close(); err != nil {
			m.logger.Warn("close metrics server", "error", err)
		}
		m.srv = nil
	}
	m.client.Close()
}

// Addr is where metrics are served, "" when not serving.
func (m *workerMetrics) Addr() string {
	if m == nil || m.srv == nil {
		return ""
	}
	return m.srv.Addr()
}

// sampleGPUs sets the GPU gauges every interval until ctx is done.
func (m *workerMetrics) sampleGPUs(ctx context.Context, h client.MetricsHandler, interval time.Duration) {
	defer close(m.done)
	if m.gpus == nil {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		sampleGPUsOnce(m.gpus, m.leases, h)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func sampleGPUsOnce(gpus GPUHost, leases *gpu.Allocator, h client.MetricsHandler) {
	health, err := gpus.Health()
	if err != nil {
		return
	}
	for _, g := range health {
		u, err := gpus.Utilization(g.UUID)
		if err != nil {
			continue
		}
		h.WithTags(map[string]string{"gpu": g.UUID}).Gauge(MetricGPUUtilization).Update(float64(u.GPU))
	}
	if leases != nil {
		h.Gauge(MetricGPUsLeased).Update(float64(leases.Leased()))
	}
}

// instrumented records a node's duration, attempt and outcome around its
// activity, by node type; deploy and rollback_model also count as deploys
// and rollbacks. With no metrics handler configured the SDK's is a no-op.
func instrumented(nodeType string, fn func(context.Context, nodetype.Input) (nodetype.Result, error)) func(context.Context, nodetype.Input) (nodetype.Result, error) {
	return func(ctx context.Context, in nodetype.Input) (nodetype.Result, error) {
		started := time.Now()
		res, err := fn(ctx, in)
		status := "ok"
		switch {
		case err == nil:
		case errors.Is(err, context.Canceled) || temporal.IsCanceledError(err):
			status = "cancelled"
		default:
			status = "failed"
		}
		h := activity.GetMetricsHandler(ctx).WithTags(map[string]string{"node_type": nodeType})
		hs := h.WithTags(map[string]string{"status": status})
		hs.Timer(MetricNodeDuration).Record(time.Since(started))
		hs.Counter(MetricNodeAttempts).Inc(1)
		if activity.GetInfo(ctx).Attempt > 1 {
			h.Counter(MetricNodeRetries).Inc(1)
		}
		switch nodeType {
		case models.DeployName:
			hs.Counter(MetricDeploys).Inc(1)
		case models.RollbackModelName:
			hs.Counter(MetricRollbacks).Inc(1)
		}
		return res, err
	}
}

// outcomeInterceptor counts finished runs, gate decisions and the
// attempts of nodes that run as child workflows (promote_features, split,
// gate) from the workflows' results, through the replay-aware workflow
// metrics handler.
type outcomeInterceptor struct {
	interceptor.WorkerInterceptorBase
	children map[string]string // child workflow type -> node type
}

func (o *outcomeInterceptor) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	i := &outcomeInbound{children: o.children}
	i.Next = next
	return i
}

type outcomeInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	children map[string]string
}

func (i *outcomeInbound) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	res, err := i.Next.ExecuteWorkflow(ctx, in)
	if workflow.IsContinueAsNewError(err) {
		return res, err
	}
	h := workflow.GetMetricsHandler(ctx)
	info := workflow.GetInfo(ctx)
	if nodeType, ok := i.children[info.WorkflowType.Name]; ok {
		// As instrumented does for an activity node: one attempt of the
		// node is one run of its child workflow.
		status := "ok"
		switch {
		case err == nil:
		case temporal.IsCanceledError(err):
			status = "cancelled"
		default:
			status = "failed"
		}
		hs := h.WithTags(map[string]string{"node_type": nodeType, "status": status})
		hs.Timer(MetricNodeDuration).Record(workflow.Now(ctx).Sub(info.WorkflowStartTime))
		hs.Counter(MetricNodeAttempts).Inc(1)
	}
	switch info.WorkflowType.Name {
	case runs.PipelineWorkflow:
		if pin, ok := firstArg[runs.PipelineInput](in); ok && pin.DryRun {
			break // a check by `schedule apply`, not a run
		}
		pipeline, status := runOutcome(in, res, err)
		h.WithTags(map[string]string{"pipeline": pipeline, "status": status}).Counter(MetricRuns).Inc(1)
		if pin, ok := firstArg[runs.PipelineInput](in); ok && pin.Schedule != "" {
			h.WithTags(map[string]string{"pipeline": pipeline, "schedule": pin.Schedule, "verdict": scheduledVerdict(res)}).
				Counter(MetricScheduledGate).Inc(1)
		}
	case gateWorkflowName:
		if decision := gateDecision(res); decision != "" {
			h.WithTags(map[string]string{"decision": decision}).Counter(MetricGateDecisions).Inc(1)
		}
	}
	return res, err
}

// scheduledVerdict is a finished run's gate verdict for
// MetricScheduledGate: rejected when a gate rejected the candidate (and
// the run went on: on_reject: skip), passed when every gate passed it,
// else undecided.
func scheduledVerdict(res any) string {
	r, ok := res.(*runs.Result)
	if !ok || r == nil {
		return "undecided"
	}
	switch rejected, passed := runs.GateOutcome(runs.Verdict(r)); {
	case rejected:
		return "rejected"
	case passed:
		return "passed"
	}
	return "undecided"
}

// firstArg is the workflow's first argument as a T, if it is one.
func firstArg[T any](in *interceptor.ExecuteWorkflowInput) (T, bool) {
	var zero T
	if len(in.Args) == 0 {
		return zero, false
	}
	v, ok := in.Args[0].(T)
	return v, ok
}

// gateWorkflowName is the gate node's child workflow type.
var gateWorkflowName = gate.Types(nil)[0].TargetName()

func runOutcome(in *interceptor.ExecuteWorkflowInput, res any, err error) (pipeline, status string) {
	if r, ok := res.(*runs.Result); ok && r != nil {
		pipeline, status = r.Pipeline, string(r.Status)
	}
	if pipeline == "" && len(in.Args) > 0 {
		if pin, ok := in.Args[0].(runs.PipelineInput); ok {
			pipeline = pin.Pipeline
		}
	}
	if pipeline == "" {
		pipeline = "inline"
	}
	if status == "" || status == string(runs.StatusRunning) {
		status = string(runs.StatusSucceeded)
		if err != nil {
			status = string(runs.StatusFailed)
			if temporal.IsCanceledError(err) {
				status = string(runs.StatusCancelled)
			}
		}
	}
	return pipeline, status
}

// gateDecision reads passed and forced from a gate workflow's result.
func gateDecision(res any) string {
	var outputs map[string]any
	switch r := res.(type) {
	case nodetype.Result:
		outputs = r.Outputs
	case *nodetype.Result:
		if r != nil {
			outputs = r.Outputs
		}
	}
	if outputs == nil {
		return ""
	}
	switch {
	case outputs["forced"] == true:
		return "approved"
	case outputs["passed"] == true:
		return "passed"
	default:
		return "rejected"
	}
}
