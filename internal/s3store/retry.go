package s3store

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddle "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
)

// Retry defaults. The SDK's own (3 attempts, a token bucket of 100
// retries shared by the client) give up within a few seconds of a store
// that answers 503 SlowDown or resets connections, long before a degraded
// store recovers, and the activity then fails a whole step for one lost
// request. Ten attempts with waits capped at 10 s ride out about a minute:
// the SDK's backoff is a random wait below 2, 4 and 8 s for the first
// three retries and then exactly MaxBackoff, so the sixth attempt starts at
// least 30 s after the first (an endpoint down for 30 s is outlived within
// one request) and the tenth after at most 74 s.
const (
	defaultMaxAttempts = 10
	defaultMaxBackoff  = 10 * time.Second
	// openMaxAttempts keeps Open's reachability check at the SDK's
	// default: a wrong endpoint at startup should fail in seconds, not
	// after a minute of patience meant for a store that worked a moment ago.
	openMaxAttempts = 3
)

// Reasons a request was retried, as in RetryEvent.Reason and the
// retrain_s3_retries_total metric's reason label. The set is fixed so that
// the label's cardinality stays bounded whatever a server answers.
const (
	RetryThrottled   = "throttled"    // 503 SlowDown, 429 and the SDK's throttle codes
	RetryServerError = "server_error" // any other 5xx
	RetryTimeout     = "timeout"      // RequestTimeout or a network timeout
	RetryConnection  = "connection"   // no response: refused, reset, closed
	RetryOther       = "other"
)

// RetryEvent describes one request the SDK is about to send again.
type RetryEvent struct {
	Operation string // SDK operation, such as "PutObject" or "UploadPart"
	Bucket    string
	Key       string // full key in the bucket; empty for bucket operations
	Attempt   int    // the attempt about to be sent: 2 or more
	Reason    string // one of the Retry* reasons
	Err       string // what the previous attempt failed with, free of credentials
}

// retryState follows one operation through its attempts. The SDK runs an
// operation's attempts one after another, so it needs no lock.
type retryState struct {
	bucket, key string
	attempts    int
	lastErr     error
}

type retryStateKey struct{}

// retryer is the Store's retry policy: the SDK's standard retryer (which
// already treats 500/502/503/504, SlowDown and the throttle codes,
// RequestTimeout and refused or reset connections as retryable) with more
// attempts, and without the client-side retry quota: that quota protects
// AWS from a fleet's retry storms, but on one worker it turns a store that
// fails a tenth of its requests into one whose every request fails at once
// until enough requests have succeeded.
func retryer(cfg Config) aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = cmp.Or(cfg.MaxAttempts, defaultMaxAttempts)
		o.MaxBackoff = cmp.Or(cfg.MaxBackoff, defaultMaxBackoff)
		o.RateLimiter = ratelimit.None
	})
}

// retryCounter counts, logs and reports the retries of the requests sent
// with one aws.Config: a Store's, or one AWSConfig returned for a client
// that s3store does not build.
type retryCounter struct {
	log     *slog.Logger
	onRetry func(RetryEvent)
	redact  redactor // removes the credentials from the errors it logs
	n       atomic.Int64
}

// countRetries adds to an operation's middleware stack what counts and
// logs its retries: before serialization, the bucket and key the input
// names; inside the SDK's retry loop, each attempt after the first.
func (c *retryCounter) countRetries(stack *middleware.Stack) error {
	if _, ok := stack.Finalize.Get("Retry"); !ok {
		// A stack without the SDK's retry loop (a presigner's) retries
		// nothing, and must not fail for want of it.
		return nil
	}
	target := middleware.InitializeMiddlewareFunc("retrain.s3store.RetryTarget",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			st := &retryState{bucket: stringField(in.Parameters, "Bucket"), key: stringField(in.Parameters, "Key")}
			return next.HandleInitialize(context.WithValue(ctx, retryStateKey{}, st), in)
		})
	if err := stack.Initialize.Add(target, middleware.Before); err != nil {
		return err
	}
	attempt := middleware.FinalizeMiddlewareFunc("retrain.s3store.RetryCount",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			st, _ := ctx.Value(retryStateKey{}).(*retryState)
			if st != nil {
				st.attempts++
				if st.attempts > 1 {
					c.retried(ctx, st)
				}
			}
			out, md, err := next.HandleFinalize(ctx, in)
			if st != nil {
				st.lastErr = err
			}
			return out, md, err
		})
	// After "Retry" is inside its loop: this runs once per attempt.
	return stack.Finalize.Insert(attempt, "Retry", middleware.After)
}

// retried records that the attempt st.attempts is a retry of st.lastErr.
func (c *retryCounter) retried(ctx context.Context, st *retryState) {
	c.n.Add(1)
	ev := RetryEvent{
		Operation: awsmiddle.GetOperationName(ctx),
		Bucket:    st.bucket,
		Key:       st.key,
		Attempt:   st.attempts,
		Reason:    retryReason(st.lastErr),
	}
	path := ""
	if st.key != "" {
		path = URI{Bucket: st.bucket, Key: st.key}.String()
	}
	if st.lastErr != nil {
		ev.Err = wrapErr(c.redact, ev.Operation, path, st.lastErr).(*Error).Msg
	}
	c.log.WarnContext(ctx, "s3store: retrying request",
		"operation", ev.Operation, "bucket", ev.Bucket, "key", ev.Key,
		"attempt", ev.Attempt, "reason", ev.Reason, "error", ev.Err)
	if c.onRetry != nil {
		c.onRetry(ev)
	}
}

// Retries returns how many requests the Store has sent again since it was
// opened.
func (s *Store) Retries() int64 { return s.retry.n.Load() }

// retryReason sorts the error of a failed attempt into one of the Retry*
// reasons.
func retryReason(err error) string {
	if err == nil {
		return RetryOther
	}
	var status int
	if re, ok := errors.AsType[*awshttp.ResponseError](err); ok {
		status = re.HTTPStatusCode()
	}
	var code string
	if ae, ok := errors.AsType[smithy.APIError](err); ok {
		code = ae.ErrorCode()
	}
	if _, ok := retry.DefaultThrottleErrorCodes[code]; ok || status == 429 || status == 503 {
		return RetryThrottled
	}
	if code == "RequestTimeout" || code == "RequestTimeoutException" {
		return RetryTimeout
	}
	if status >= 500 {
		return RetryServerError
	}
	if status == 0 {
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			return RetryTimeout
		}
		return RetryConnection
	}
	return RetryOther
}

// stringField returns the *string field name of an operation's input
// struct, "" when it has none. Reflection instead of a type switch: every
// S3 input that addresses a bucket or an object calls the fields Bucket
// and Key, and a switch would silently miss operations added later.
func stringField(params any, name string) string {
	v := reflect.ValueOf(params)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return ""
	}
	v = v.Elem()
	if v.Kind() != reflect.Struct {
		return ""
	}
	f := v.FieldByName(name)
	if !f.IsValid() || f.Type() != reflect.TypeFor[*string]() || f.IsNil() {
		return ""
	}
	return *f.Interface().(*string)
}

// openAttempts is the per-call option of Open's reachability check.
func openAttempts(o *s3.Options) { o.RetryMaxAttempts = openMaxAttempts }
