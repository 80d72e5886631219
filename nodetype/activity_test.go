package nodetype

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/errtype"
)

// TestWithAttemptKeepsCause: the error a node returns stays the cause of
// the error that carries the attempt, in process (errors.Is/As) and after
// the round trip through Temporal's failure converter (type, retryability
// and details of both); the message states the type once.
func TestWithAttemptKeepsCause(t *testing.T) {
	type check struct{ Rows int }
	orig := temporal.NewApplicationErrorWithOptions("rows differ", errtype.CheckFailed, temporal.ApplicationErrorOptions{
		NonRetryable: true, Details: []any{check{Rows: 7}}, NextRetryDelay: 3 * time.Second,
	})
	got := withAttempt(fmt.Errorf("evaluate: %w", orig), 3)

	if !errors.Is(got, orig) {
		t.Fatalf("errors.Is(%v, original) = false", got)
	}
	var top *temporal.ApplicationError
	if !errors.As(got, &top) || top.Type() != errtype.CheckFailed || !top.NonRetryable() || top.NextRetryDelay() != 3*time.Second {
		t.Fatalf("outer error %#v: want non-retryable %s with the original's retry delay", top, errtype.CheckFailed)
	}
	if top.Message() != "evaluate: rows differ" {
		t.Errorf("message %q, want %q", top.Message(), "evaluate: rows differ")
	}

	conv := temporal.GetDefaultFailureConverter()
	back := conv.FailureToError(conv.ErrorToFailure(got))
	var outer *temporal.ApplicationError
	if !errors.As(back, &outer) || outer.Type() != errtype.CheckFailed || !outer.NonRetryable() {
		t.Fatalf("decoded %v: want a non-retryable %s", back, errtype.CheckFailed)
	}
	var d FailureDetails
	if err := outer.Details(&d); err != nil || d.Attempt != 3 {
		t.Errorf("decoded details %+v, %v: want attempt 3", d, err)
	}
	if n := strings.Count(outer.Message(), "(type:"); n != 0 {
		t.Errorf("message %q states the type itself", outer.Message())
	}
	// The cause chain holds the original failure with its own details.
	var found bool
	for e := errors.Unwrap(back); e != nil; e = errors.Unwrap(e) {
		var a *temporal.ApplicationError
		if errors.As(e, &a) && a.Message() == "rows differ" {
			var c check
			if err := a.Details(&c); err != nil || c.Rows != 7 {
				t.Errorf("original details %+v, %v", c, err)
			}
			found = a.Type() == errtype.CheckFailed
			break
		}
	}
	if !found {
		t.Errorf("decoded %v: the original %s failure is not in the cause chain", back, errtype.CheckFailed)
	}
}

// TestWithAttemptPlainError: a plain error becomes a retryable NodeFailed
// whose cause is still the error, sentinel and all.
func TestWithAttemptPlainError(t *testing.T) {
	got := withAttempt(fmt.Errorf("read manifest: %w", io.ErrUnexpectedEOF), 2)
	var appErr *temporal.ApplicationError
	if !errors.As(got, &appErr) || appErr.Type() != errtype.NodeFailed || appErr.NonRetryable() {
		t.Fatalf("%v: want a retryable %s", got, errtype.NodeFailed)
	}
	if !errors.Is(got, io.ErrUnexpectedEOF) {
		t.Errorf("errors.Is(%v, io.ErrUnexpectedEOF) = false", got)
	}
	if appErr.Message() != "read manifest: unexpected EOF" {
		t.Errorf("message %q", appErr.Message())
	}
	if c := context.Canceled; withAttempt(c, 1) != c {
		t.Error("a cancellation must stay a cancellation")
	}
}

func TestMessageOf(t *testing.T) {
	err := fmt.Errorf("deploy: %w", Permanent(errtype.BadInput, "no model %q", "ctr"))
	if got, want := err.Error(), `deploy: no model "ctr" (type: BadInput, retryable: false)`; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if got, want := MessageOf(err), `deploy: no model "ctr"`; got != want {
		t.Errorf("MessageOf = %q, want %q", got, want)
	}
	if got := MessageOf(io.EOF); got != "EOF" {
		t.Errorf("MessageOf(io.EOF) = %q", got)
	}
}
