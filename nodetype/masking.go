package nodetype

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"

	commonpb "go.temporal.io/api/common/v1"
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/sdk/temporal"
)

// The secrets a node's attempt resolved are noted in its context
// (NoteSecrets, which progenv's Resolve calls), so that the activity
// wrapper masks them in whatever leaves the attempt for Temporal: its
// outputs, its error (message, causes, details) and the progress it
// heartbeats. Masking does not depend on each node type remembering to.

type secretRegistry struct {
	mu     sync.Mutex
	values []string
	masker *Masker // of values; nil until asked for after a change
}

type secretRegistryKey struct{}

// withSecretRegistry returns ctx with a registry of noted secrets: the one
// ctx has, else a new one.
func withSecretRegistry(ctx context.Context) (context.Context, *secretRegistry) {
	if r, ok := ctx.Value(secretRegistryKey{}).(*secretRegistry); ok {
		return ctx, r
	}
	r := &secretRegistry{}
	return context.WithValue(ctx, secretRegistryKey{}, r), r
}

// WithSecretRegistry gives ctx a registry of noted secrets, for steps run
// outside Activity and New's Run (tests, activities of child workflows);
// SecretMasker(ctx) then masks what NoteSecrets noted on it.
func WithSecretRegistry(ctx context.Context) context.Context {
	ctx, _ = withSecretRegistry(ctx)
	return ctx
}

// NoteSecrets records secret values the running node resolved, to be
// masked in its outputs, error and heartbeats. Without a registry in ctx
// (a step called outside a node's activity) it does nothing.
func NoteSecrets(ctx context.Context, values ...string) {
	r, ok := ctx.Value(secretRegistryKey{}).(*secretRegistry)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range values {
		if v != "" && !slices.Contains(r.values, v) {
			r.values = append(r.values, v)
			r.masker = nil
		}
	}
}

// SecretMasker returns the Masker of the secrets noted in ctx so far; nil
// (which masks nothing) when there are none.
func SecretMasker(ctx context.Context) *Masker {
	r, ok := ctx.Value(secretRegistryKey{}).(*secretRegistry)
	if !ok {
		return nil
	}
	return r.get()
}

func (r *secretRegistry) get() *Masker {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.masker == nil && len(r.values) > 0 {
		r.masker = NewMasker(r.values)
	}
	return r.masker
}

// Error returns err with the secrets masked everywhere Temporal would
// record them: the message of err and of each of its causes, and their
// details. When nothing needs masking it returns err itself. Otherwise the
// error is rebuilt from its failure form (Temporal's failure converter):
// the application errors in it keep their types, retryability, retry
// delays, categories and details (decoded as Temporal decodes them), and
// the masked failure is what Temporal records. errors.Is and errors.As
// find Temporal's error types in the result but no longer the original
// Go errors. A cancellation is returned as it is.
func (m *Masker) Error(err error) error {
	if m.Empty() || err == nil || errors.Is(err, context.Canceled) || temporal.IsCanceledError(err) {
		return err
	}
	conv := temporal.GetDefaultFailureConverter()
	f := conv.ErrorToFailure(err)
	if !m.failure(f) {
		return err
	}
	if _, ok := err.(*temporal.ApplicationError); ok {
		return conv.FailureToError(f)
	}
	// A Go error on top: its failure would take the Go type's name as its
	// error type, and so would the wrappers down to the first application
	// error, which errors.As (and so withAttempt) would then find first.
	// Its masked text goes on top of the masked rebuild of that first
	// application error instead, keeping err's type and retryability.
	top := &maskedError{text: f.Message}
	appErr, ok := errors.AsType[*temporal.ApplicationError](err)
	if !ok {
		return top
	}
	at := f
	for e := err; e != nil && at != nil; e, at = errors.Unwrap(e), at.GetCause() {
		if e == error(appErr) {
			top.cause = conv.FailureToError(at)
			return top
		}
	}
	// Not on the chain of single causes (inside an errors.Join): its type
	// and retryability, with its own message masked.
	top.cause = temporal.NewApplicationErrorWithOptions(m.String(appErr.Message()), appErr.Type(), temporal.ApplicationErrorOptions{
		NonRetryable: appErr.NonRetryable(), NextRetryDelay: appErr.NextRetryDelay(), Category: appErr.Category(),
	})
	return top
}

// maskedError is a Go error that held a secret: its masked text, over the
// masked first application error it wrapped (nil if none).
type maskedError struct {
	text  string
	cause error
}

func (e *maskedError) Error() string { return e.text }
func (e *maskedError) Unwrap() error { return e.cause }

// failure masks f and its causes in place; it reports whether it changed
// anything.
func (m *Masker) failure(f *failurepb.Failure) bool {
	changed := false
	for ; f != nil; f = f.GetCause() {
		if s := m.String(f.Message); s != f.Message {
			f.Message, changed = s, true
		}
		if s := m.String(f.StackTrace); s != f.StackTrace {
			f.StackTrace, changed = s, true
		}
		if m.payloads(f.GetApplicationFailureInfo().GetDetails()) {
			changed = true
		}
		if m.payloads(f.GetCanceledFailureInfo().GetDetails()) {
			changed = true
		}
		if m.payloads(f.GetTimeoutFailureInfo().GetLastHeartbeatDetails()) {
			changed = true
		}
		if m.payload(f.GetEncodedAttributes()) {
			changed = true
		}
	}
	return changed
}

func (m *Masker) payloads(ps *commonpb.Payloads) bool {
	changed := false
	for _, p := range ps.GetPayloads() {
		if m.payload(p) {
			changed = true
		}
	}
	return changed
}

// payload masks p's data in place: a JSON payload is decoded, masked and
// encoded again, so it stays JSON; any other is masked as text.
func (m *Masker) payload(p *commonpb.Payload) bool {
	if p == nil || !m.Contains(string(p.Data)) {
		return false
	}
	if string(p.GetMetadata()["encoding"]) == "json/plain" {
		d := json.NewDecoder(bytes.NewReader(p.Data))
		d.UseNumber()
		var v any
		if d.Decode(&v) == nil {
			if b, err := json.Marshal(m.Value(v)); err == nil {
				p.Data = b
				return true
			}
		}
	}
	p.Data = []byte(m.String(string(p.Data)))
	return true
}

// details returns heartbeat details with the secrets masked: a detail
// whose JSON form holds one is replaced by its masked JSON form, which a
// retry decodes into the same type (activity.GetHeartbeatDetails).
func (m *Masker) details(details []any) []any {
	if m.Empty() {
		return details
	}
	var out []any
	for i, d := range details {
		b, err := json.Marshal(d)
		if err != nil || !m.Contains(string(b)) {
			continue
		}
		masked, err := json.Marshal(m.Value(d))
		if err != nil {
			masked, _ = json.Marshal(m.String(string(b)))
		}
		if out == nil {
			out = slices.Clone(details)
		}
		out[i] = json.RawMessage(masked)
	}
	if out == nil {
		return details
	}
	return out
}
