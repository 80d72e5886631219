// Package activities holds the steps a pipeline runs: one Temporal activity
// per node type, plus the resolver that turns a pipeline name or spec into a
// validated plan. Activities do the I/O; the Pipeline workflow only schedules
// them and passes small values (URIs, ids, numbers) between them.
package activities

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
)

// NodeInput is what the interpreter sends to every node activity: the node's
// `with` block with all ${...} references already resolved.
type NodeInput struct {
	Pipeline string         `json:"pipeline"`
	RunID    string         `json:"run_id"` // workflow id of the pipeline run
	Node     string         `json:"node"`
	Type     string         `json:"type"`
	With     map[string]any `json:"with,omitempty"`
	// Options are the node's timeout, heartbeat and retry policy from the
	// plan, sent to node types that run as child workflows and schedule
	// activities of their own (promote_features). Nil for activity nodes,
	// and in runs recorded before it was sent.
	Options *NodeOptions `json:"options,omitempty"`
}

// NodeOptions are how a node's activities run, as its plan node says.
type NodeOptions struct {
	Timeout   time.Duration    `json:"timeout"`   // start-to-close of one attempt
	Heartbeat time.Duration    `json:"heartbeat"` // 0 disables
	Retry     dags.RetryPolicy `json:"retry"`
}

// NodeResult is what every node activity returns.
type NodeResult struct {
	Outputs   map[string]any `json:"outputs,omitempty"`
	Attempt   int32          `json:"attempt"`    // the attempt that produced this result (1-based)
	StartedAt time.Time      `json:"started_at"` // worker clock, start of that attempt
	EndedAt   time.Time      `json:"ended_at"`   // worker clock, end of that attempt
}

// FailureDetails rides on a failed node's error so the workflow can report
// how many attempts were made; Temporal's ActivityError does not carry it.
type FailureDetails struct {
	Attempt int32 `json:"attempt"`
}

// NodeFunc implements a node type. It returns the node's outputs, which must
// be small JSON values: they are recorded in workflow history.
type NodeFunc func(ctx context.Context, in NodeInput) (map[string]any, error)

// Step is a node type together with its implementation. Steps is the one
// list of node types the validator, the CLI and the worker share.
type Step struct {
	Type dags.NodeType
	Run  NodeFunc
}

// Activity adapts a NodeFunc to a Temporal activity: it stamps the attempt
// and times on the result, keeps a liveness heartbeat going while the node
// runs (so a crashed worker is noticed after the heartbeat timeout, not the
// whole start-to-close timeout), and attaches the attempt number to errors.
func Activity(run NodeFunc) func(context.Context, NodeInput) (NodeResult, error) {
	return func(ctx context.Context, in NodeInput) (NodeResult, error) {
		info := activity.GetInfo(ctx)
		started := time.Now()
		ctx, stop := startKeepAlive(ctx)
		outputs, err := run(ctx, in)
		stop()
		if err != nil {
			return NodeResult{}, withAttempt(err, info.Attempt)
		}
		return NodeResult{Outputs: outputs, Attempt: info.Attempt, StartedAt: started, EndedAt: time.Now()}, nil
	}
}

// heartbeat holds the details a step last reported with RecordProgress.
type heartbeat struct {
	mu      sync.Mutex
	details []any
}

type heartbeatKey struct{}

func (h *heartbeat) set(details []any) {
	h.mu.Lock()
	h.details = details
	h.mu.Unlock()
}

func (h *heartbeat) get() []any {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.details
}

// RecordProgress heartbeats a step's progress (a step number, a checkpoint
// URI): what a retry reads back with activity.GetHeartbeatDetails. Steps
// call it instead of activity.RecordHeartbeat because each heartbeat
// replaces the last one's details, and the wrapper's liveness heartbeats
// would otherwise wipe them; through here they repeat them instead.
func RecordProgress(ctx context.Context, details ...any) {
	if hb, ok := ctx.Value(heartbeatKey{}).(*heartbeat); ok {
		hb.set(details)
	}
	activity.RecordHeartbeat(ctx, details...)
}

// startKeepAlive keeps a liveness heartbeat going for the activity in ctx
// until stop is called: at a third of its heartbeat timeout (none if it has
// no timeout), repeating the latest details reported with RecordProgress on
// the returned context. Activity does this for every node; activities that
// are not nodes but run long call it themselves. The SDK throttles
// heartbeats, so steps that also report progress do not multiply traffic.
func startKeepAlive(ctx context.Context) (_ context.Context, stop func()) {
	hb := &heartbeat{}
	ctx = context.WithValue(ctx, heartbeatKey{}, hb)
	timeout := activity.GetInfo(ctx).HeartbeatTimeout
	if timeout <= 0 {
		return ctx, func() {}
	}
	beatCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(timeout / 3)
		defer t.Stop()
		for {
			select {
			case <-beatCtx.Done():
				return
			case <-t.C:
				activity.RecordHeartbeat(beatCtx, hb.get()...)
			}
		}
	}()
	return ctx, func() { cancel(); <-done }
}

// withAttempt rewraps err as an application error carrying the attempt
// number, with err's error type, retryability, retry delay and category,
// and err itself as its cause: errors.Is and errors.As find it here, and
// its failure (type and details) travels under the new one to the
// workflow. The message is err's text without the "(type: T, retryable:
// R)" an application error in it appends, which the new error adds again.
func withAttempt(err error, attempt int32) error {
	if errors.Is(err, context.Canceled) {
		return err // cancellation must stay a cancellation
	}
	opts := temporal.ApplicationErrorOptions{
		Cause:   err,
		Details: []any{FailureDetails{Attempt: attempt}},
	}
	typ := errtype.NodeFailed
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		if appErr.Type() != "" {
			typ = appErr.Type()
		}
		opts.NonRetryable = appErr.NonRetryable()
		opts.NextRetryDelay = appErr.NextRetryDelay()
		opts.Category = appErr.Category()
	}
	return temporal.NewApplicationErrorWithOptions(MessageOf(err), typ, opts)
}

// MessageOf is err's text without the "(type: T, retryable: R)" that the
// first application error in it appends: for an error that carries err as
// its cause and states the type itself.
func MessageOf(err error) string {
	text := err.Error()
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() != "" {
		text = strings.Replace(text, fmt.Sprintf(" (type: %s, retryable: %v)", appErr.Type(), !appErr.NonRetryable()), "", 1)
	}
	return text
}

// Permanent marks err as not worth retrying: bad input, a divergence, a
// check that failed on data that will not change.
func Permanent(typ string, format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), typ, nil)
}
