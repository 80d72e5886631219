package nodetype

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/s3store"
)

// Activity adapts a Func to a Temporal activity: it stamps the attempt
// and times on the result, keeps a liveness heartbeat going while the node
// runs (so a crashed worker is noticed after the heartbeat timeout, not the
// whole start-to-close timeout), attaches the attempt number to errors,
// and masks the secrets the attempt resolved (NoteSecrets) in its outputs,
// error and progress heartbeats.
func Activity(run Func) func(context.Context, Input) (Result, error) {
	return func(ctx context.Context, in Input) (Result, error) {
		info := activity.GetInfo(ctx)
		started := time.Now()
		ctx, stop := StartKeepAlive(ctx)
		ctx = withSecretRefs(ctx, in.Secrets) // for Funcs not made by New
		ctx, secrets := withSecretRegistry(ctx)
		ctx, usage := s3store.WithUsage(ctx, in.Type)
		outputs, err := run(ctx, in)
		stop()
		outputs = withS3Usage(outputs, usage.Figures())
		// The secrets the attempt resolved (NoteSecrets) are masked in
		// all it hands Temporal, whatever the step masked itself.
		mask := secrets.get()
		if err != nil {
			return Result{}, mask.Error(withAttempt(err, info.Attempt))
		}
		return Result{Outputs: mask.Outputs(outputs), Attempt: info.Attempt, StartedAt: started, EndedAt: time.Now()}, nil
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
//
// Details that hold a secret the node resolved are recorded masked.
func RecordProgress(ctx context.Context, details ...any) {
	details = SecretMasker(ctx).details(details)
	if hb, ok := ctx.Value(heartbeatKey{}).(*heartbeat); ok {
		hb.set(details)
	}
	activity.RecordHeartbeat(ctx, details...)
}

// StartKeepAlive keeps a liveness heartbeat going for the activity in ctx
// until stop is called: at a third of its heartbeat timeout (none if it has
// no timeout), repeating the latest details reported with RecordProgress on
// the returned context. Activity does this for every node; activities that
// are not nodes but run long call it themselves. The SDK throttles
// heartbeats, so steps that also report progress do not multiply traffic.
func StartKeepAlive(ctx context.Context) (_ context.Context, stop func()) {
	hb := &heartbeat{}
	ctx = context.WithValue(ctx, heartbeatKey{}, hb)
	timeout := activity.GetInfo(ctx).HeartbeatTimeout
	if timeout <= 0 {
		return ctx, func() {}
	}
	// The heartbeat goes out on the activity's own context, not one that
	// stop cancels: the SDK sends it on that context, and cancelling a
	// heartbeat in flight made the SDK log a "RecordActivityHeartbeat with
	// error: context canceled" warning when a step ended. stop waits for
	// a heartbeat in flight instead.
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(timeout / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-quit:
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx, hb.get()...)
			}
		}
	}()
	return ctx, func() { close(quit); <-done }
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

// withS3Usage adds to a node's outputs, under "s3", the S3 requests its
// attempt sent, the bytes they moved and the time it waited on them
// (s3store.Usage: the lake's table IO and the object store count into
// it), when it sent any and has no output of that name itself.
func withS3Usage(outputs map[string]any, u s3store.UsageFigures) map[string]any {
	if u.Requests == 0 || outputs == nil {
		return outputs
	}
	if _, taken := outputs["s3"]; taken {
		return outputs
	}
	outputs["s3"] = map[string]any{"requests": u.Requests, "bytes": u.Bytes, "wait_ms": u.WaitMillis}
	return outputs
}
