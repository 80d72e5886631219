package worker

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	lakenode "github.com/retrain-ml/retrain/activities/lake"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/runs"
)

// The guard: only a Pipeline run under this worker's policy executes a
// node here.
//
// A client that may start executions on the namespace can start any
// workflow type a worker registers, with any input, and (on servers that
// allow standalone activities) any activity type. The worker's policy —
// its pipeline folder, inline specs refused, allowed programs and paths,
// its secrets — is applied where a Pipeline run resolves its spec, so
// every other entry point must lead back to one:
//
//   - an activity runs only when a workflow of retrain's own types
//     scheduled it (a standalone start has no workflow), and that
//     workflow's root is a Pipeline run on a task queue this worker trusts
//     (by default its own): the server records both, and the guard asks it
//     (DescribeWorkflowExecution, cached per run), so no input can claim
//     them. A node that a more permissive worker's run sends onto this
//     worker's queue is refused too.
//   - a workflow other than Pipeline (ForeachChunk, a node type's child
//     workflow) runs only as a child: its parent is set by the server, and
//     a client cannot start a child. Its activities pass the check above.
//
// Refusals fail the execution with error type Refused before any of its
// code runs, and are logged.

// guardCacheSize bounds the runs whose origin the guard remembers: one
// entry per workflow run that scheduled activities recently.
const guardCacheSize = 4096

// describeTimeout bounds one DescribeWorkflowExecution of the guard.
const describeTimeout = 10 * time.Second

// origin is what the server says of a workflow run that scheduled an
// activity: the type and task queue of the root of its chain of parents.
type origin struct {
	rootID, rootType, rootQueue string
}

type guard struct {
	interceptor.WorkerInterceptorBase
	client    client.Client
	trusted   []string        // task queues whose Pipeline runs may run nodes here
	workflows map[string]bool // workflow types retrain registers on this worker
	origins   *lru.Cache[string, origin]
	logger    *slog.Logger
	identity  string     // this worker's, for refusals that depend on its policy
	peers     *peerWatch // the queue's workers under other policies; nil: none known
}

func newGuard(c client.Client, trusted []string, workflowTypes []string, logger *slog.Logger) *guard {
	cache, _ := lru.New[string, origin](guardCacheSize) // only fails for a size <= 0
	wf := make(map[string]bool, len(workflowTypes))
	for _, t := range workflowTypes {
		wf[t] = true
	}
	return &guard{client: c, trusted: trusted, workflows: wf, origins: cache, logger: logger}
}

func refused(format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), errtype.Refused, nil)
}

// InterceptWorkflow refuses a workflow other than Pipeline that has no
// parent: a client started it directly.
func (g *guard) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &guardWorkflow{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, g: g}
}

type guardWorkflow struct {
	interceptor.WorkflowInboundInterceptorBase
	g *guard
}

func (i *guardWorkflow) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	info := workflow.GetInfo(ctx)
	// A table's promotion queue is started by the promotion's activity
	// (signal-with-start), so it has no parent. It runs no activity and no
	// user code: it only orders the promotions that signal it. One a
	// client starts runs too, but no promotion waits on it: the enqueuer
	// checks the queue's proof (activities/lake/queuekey.go) and goes
	// ahead on the commit's compare-and-swap without it.
	if name := info.WorkflowType.Name; name != runs.PipelineWorkflow && name != lakenode.TableQueueWorkflow && info.ParentWorkflowExecution == nil {
		// Deterministic: both come from the workflow's first event.
		workflow.GetLogger(ctx).Warn("refused a workflow started without a Pipeline run", "workflow_type", name)
		return nil, refused("workflow %s runs only as part of a %s run; it was started on its own, and nothing ran",
			name, runs.PipelineWorkflow)
	}
	return i.Next.ExecuteWorkflow(ctx, in)
}

// InterceptActivity refuses an activity that no Pipeline run of a
// trusted queue scheduled.
func (g *guard) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &guardActivity{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, g: g}
}

type guardActivity struct {
	interceptor.ActivityInboundInterceptorBase
	g *guard
}

func (i *guardActivity) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	if err := i.g.check(ctx, activity.GetInfo(ctx)); err != nil {
		return nil, err
	}
	return i.Next.ExecuteActivity(ctx, in)
}

func (g *guard) check(ctx context.Context, info activity.Info) error {
	name := info.ActivityType.Name
	deny := func(err error) error {
		g.logger.Warn("refused an activity", "activity_type", name, "activity_id", info.ActivityID,
			"workflow_id", info.WorkflowExecution.ID, "error", err)
		return err
	}
	if !info.IsWorkflowActivity() {
		return deny(refused("activity %s was started on its own (a standalone activity), not by a %s run; "+
			"this worker runs activities only for the runs it resolves, and nothing ran", name, runs.PipelineWorkflow))
	}
	if info.WorkflowType == nil || !g.workflows[info.WorkflowType.Name] {
		wt := "(unknown)"
		if info.WorkflowType != nil {
			wt = info.WorkflowType.Name
		}
		return deny(refused("activity %s was scheduled by a workflow of type %s, not one of retrain's; nothing ran", name, wt))
	}
	if info.IsLocalActivity {
		return nil // it runs inside this worker's own workflow task
	}
	o, err := g.origin(ctx, info.WorkflowExecution.ID, info.WorkflowExecution.RunID)
	if err != nil {
		// The server could not say: retried, as any other call to it.
		return fmt.Errorf("check which run scheduled activity %s: %w", name, err)
	}
	if o.rootType != runs.PipelineWorkflow {
		return deny(refused("activity %s belongs to workflow %s of type %s, which is not a %s run; nothing ran",
			name, o.rootID, o.rootType, runs.PipelineWorkflow))
	}
	if !slices.Contains(g.trusted, o.rootQueue) {
		if clause := g.peers.disagreement(fieldTrusted); clause != "" {
			return deny(refused("worker %s refused activity %s of run %s on task queue %q: it runs nodes only for runs on %s (--trusted-queues); "+
				"%s: workers on one queue must share one policy; nothing ran",
				g.identity, name, o.rootID, o.rootQueue, strings.Join(g.trusted, ", "), clause))
		}
		return deny(refused("activity %s belongs to run %s on task queue %q; this worker runs nodes only for runs on %s "+
			"(--trusted-queues), whose workers apply its policy; nothing ran",
			name, o.rootID, o.rootQueue, strings.Join(g.trusted, ", ")))
	}
	return nil
}

// origin returns the root of the workflow run id/runID, from the cache or
// the server. A run's root, type and task queue never change.
func (g *guard) origin(ctx context.Context, id, runID string) (origin, error) {
	key := id + "\x00" + runID
	if o, ok := g.origins.Get(key); ok {
		return o, nil
	}
	ctx, cancel := context.WithTimeout(ctx, describeTimeout)
	defer cancel()
	d, err := g.client.DescribeWorkflowExecution(ctx, id, runID)
	if err != nil {
		return origin{}, err
	}
	info := d.GetWorkflowExecutionInfo()
	o := origin{rootID: id, rootType: info.GetType().GetName(), rootQueue: info.GetTaskQueue()}
	if root := info.GetRootExecution(); root != nil && (root.GetWorkflowId() != id || root.GetRunId() != runID) {
		if o, err = g.origin(ctx, root.GetWorkflowId(), root.GetRunId()); err != nil {
			return origin{}, err
		}
	}
	g.origins.Add(key, o)
	return o, nil
}
