package s3store

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	awsmiddle "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// RequestEvent describes one S3 request sent (one attempt: a retried
// operation is several requests, as S3 bills and as the server sees it).
type RequestEvent struct {
	Operation string // SDK operation, such as "GetObject" or "PutObject"
	// NodeType is the type of the node whose attempt sent the request
	// (WithUsage), "" outside one.
	NodeType string
	// Bytes is the payload sent (uploads) or announced by the answer's
	// Content-Length (downloads; a reader that stops early moved less).
	Bytes int64
	// Wait is from sending the request to the answer's headers.
	Wait time.Duration
	// Status is the HTTP status, 0 when no answer came.
	Status int
}

// Usage adds up the S3 requests made with a context: a node's attempt
// puts one in its context (WithUsage), and every S3 client built from an
// AWSConfig or a Store counts the requests it sends with that context
// there, so the node can report what it cost in requests, bytes and time
// waiting on S3, whichever client sent them (table IO, the object store).
type Usage struct {
	NodeType string
	requests atomic.Int64
	bytes    atomic.Int64
	wait     atomic.Int64 // nanoseconds
}

// UsageFigures are a Usage's totals.
type UsageFigures struct {
	Requests int64         `json:"requests"`
	Bytes    int64         `json:"bytes"`
	Wait     time.Duration `json:"-"`
	// WaitMillis is Wait for JSON outputs.
	WaitMillis int64 `json:"wait_ms"`
}

type usageKey struct{}

// WithUsage returns ctx carrying a new Usage for nodeType's requests. A
// Usage already in ctx is replaced: the innermost unit of work counts.
func WithUsage(ctx context.Context, nodeType string) (context.Context, *Usage) {
	u := &Usage{NodeType: nodeType}
	return context.WithValue(ctx, usageKey{}, u), u
}

// UsageFrom is the Usage in ctx, nil when none.
func UsageFrom(ctx context.Context) *Usage {
	u, _ := ctx.Value(usageKey{}).(*Usage)
	return u
}

// Add counts requests requests moving bytes bytes after waiting wait.
// A nil Usage counts nothing.
func (u *Usage) Add(requests, bytes int64, wait time.Duration) {
	if u == nil {
		return
	}
	u.requests.Add(requests)
	u.bytes.Add(bytes)
	u.wait.Add(int64(wait))
}

// AddWait adds time spent waiting on S3 outside the SDK's call, such as
// reading a download's body.
func (u *Usage) AddWait(wait time.Duration) { u.Add(0, 0, wait) }

// Figures returns the totals so far.
func (u *Usage) Figures() UsageFigures {
	if u == nil {
		return UsageFigures{}
	}
	w := time.Duration(u.wait.Load())
	return UsageFigures{Requests: u.requests.Load(), Bytes: u.bytes.Load(), Wait: w, WaitMillis: w.Milliseconds()}
}

// requestCounter counts every request sent with one aws.Config into the
// context's Usage and tells onRequest (a metric).
type requestCounter struct {
	onRequest func(RequestEvent)
}

// countRequests adds, inside the SDK's retry loop (so once per attempt),
// what times and counts each request.
func (c requestCounter) countRequests(stack *middleware.Stack) error {
	if _, ok := stack.Finalize.Get("Retry"); !ok {
		return nil // a presigner's stack sends nothing
	}
	m := middleware.FinalizeMiddlewareFunc("retrain.s3store.RequestCount",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			started := time.Now()
			out, md, err := next.HandleFinalize(ctx, in)
			ev := RequestEvent{Operation: awsmiddle.GetOperationName(ctx), Wait: time.Since(started)}
			if req, ok := in.Request.(*smithyhttp.Request); ok && req.ContentLength > 0 {
				ev.Bytes += req.ContentLength
			}
			if resp := awsmiddle.GetRawResponse(md); resp != nil {
				if hr, ok := resp.(*smithyhttp.Response); ok && hr.Response != nil {
					ev.Status = hr.StatusCode
					if hr.Request != nil && hr.Request.Method != http.MethodHead && hr.ContentLength > 0 {
						ev.Bytes += hr.ContentLength
					}
				}
			}
			u := UsageFrom(ctx)
			if u != nil {
				ev.NodeType = u.NodeType
			}
			u.Add(1, ev.Bytes, ev.Wait)
			if c.onRequest != nil {
				c.onRequest(ev)
			}
			return out, md, err
		})
	return stack.Finalize.Insert(m, "Retry", middleware.After)
}
