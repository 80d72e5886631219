package nodetype

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
)

// failureText is everything Temporal records of err: the messages,
// stack traces and details of it and its causes.
func failureText(t *testing.T, err error) string {
	t.Helper()
	f := temporal.GetDefaultFailureConverter().ErrorToFailure(err)
	b, jerr := json.Marshal(f)
	if jerr != nil {
		t.Fatal(jerr)
	}
	return string(b)
}

// TestActivityMasksNotedSecrets: a node that resolved a multi-line secret
// (NoteSecrets) and failed with an error quoting it with %q, under a
// cause holding it raw, hands Temporal a failure with neither, keeping
// the error's type, retryability and details and the attempt; its
// outputs and, on success, its outputs are masked too.
func TestActivityMasksNotedSecrets(t *testing.T) {
	type check struct{ Hook string }
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivityWithOptions(Activity(func(ctx context.Context, in Input) (map[string]any, error) {
		NoteSecrets(ctx, multiLine)
		if in.Node == "ok" {
			return map[string]any{"url": "http://h/?t=" + url.QueryEscape(multiLine), "n": 2}, nil
		}
		cause := temporal.NewNonRetryableApplicationError("raw: "+multiLine, errtype.BadInput, nil, check{Hook: multiLine})
		return nil, fmt.Errorf("deploy: parse %q: invalid: %w", "http://h/"+multiLine, cause)
	}), activity.RegisterOptions{Name: "n"})

	_, err := env.ExecuteActivity("n", Input{Node: "fail", Type: "n"})
	if err == nil {
		t.Fatal("no error")
	}
	text := failureText(t, err)
	assertNoSecret(t, "failure", text)
	if !strings.Contains(text, "deploy: parse") || !strings.Contains(text, Mask) {
		t.Errorf("failure %s lost its message", text)
	}
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != errtype.BadInput || !appErr.NonRetryable() {
		t.Fatalf("%v: want a non-retryable %s", err, errtype.BadInput)
	}
	var d FailureDetails
	if err := appErr.Details(&d); err != nil || d.Attempt != 1 {
		t.Errorf("details %+v, %v: want attempt 1", d, err)
	}
	var found bool
	for e := errors.Unwrap(appErr); e != nil; e = errors.Unwrap(e) {
		var c *temporal.ApplicationError
		if errors.As(e, &c) && c.Type() == errtype.BadInput && strings.HasPrefix(c.Message(), "raw: ") {
			var ch check
			found = c.Details(&ch) == nil && ch.Hook == Mask
		}
	}
	if !found {
		t.Errorf("%v: the cause's details are not there, masked", err)
	}

	v, err := env.ExecuteActivity("n", Input{Node: "ok", Type: "n"})
	if err != nil {
		t.Fatal(err)
	}
	var res Result
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res.Outputs)
	assertNoSecret(t, "outputs", string(b))
	if res.Outputs["url"] != "http://h/?t="+Mask || res.Outputs["n"] != 2.0 {
		t.Errorf("outputs %s", b)
	}
}

// TestActivityLeavesCleanErrorsAlone: with no secret noted, or none in
// the error, the error keeps its Go cause chain (errors.Is).
func TestActivityLeavesCleanErrorsAlone(t *testing.T) {
	sentinel := errors.New("sentinel")
	m := NewMasker([]string{multiLine})
	err := withAttempt(fmt.Errorf("read: %w", sentinel), 1)
	if got := m.Error(err); !errors.Is(got, sentinel) {
		t.Errorf("%v: a clean error was rebuilt", got)
	}
	if got := m.Error(context.Canceled); got != context.Canceled {
		t.Errorf("cancellation became %v", got)
	}
}

// TestNewMasksOutputsAndErrors: a typed node's Run masks what it returns
// even when called outside Activity, with the secrets progenv noted.
func TestNewMasksOutputsAndErrors(t *testing.T) {
	type out struct {
		Msg string `json:"msg"`
	}
	typ := New(dags.NodeType{Name: "t"}, func(ctx context.Context, in Input, w map[string]any) (out, error) {
		NoteSecrets(ctx, multiLine)
		switch in.Node {
		case "fail":
			return out{}, Permanent(errtype.BadInput, "bad value %q", multiLine)
		case "wrapped":
			return out{}, fmt.Errorf("deploy: %w", Permanent(errtype.BadInput, "bad value %q", multiLine))
		case "plain":
			return out{}, fmt.Errorf("deploy: bad value %q", multiLine)
		}
		return out{Msg: "printed " + multiLine}, nil
	})
	o, err := typ.Run(context.Background(), Input{Node: "ok"})
	if err != nil {
		t.Fatal(err)
	}
	if o["msg"] != "printed "+Mask {
		t.Errorf("outputs %v", o)
	}
	_, err = typ.Run(context.Background(), Input{Node: "fail"})
	assertNoSecret(t, "error", failureText(t, err))
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != errtype.BadInput || !appErr.NonRetryable() || appErr.Message() != "bad value \""+Mask+"\"" {
		t.Errorf("error %v: want a non-retryable %s with the value masked", err, errtype.BadInput)
	}
	// A Go error that wraps one keeps its type and retryability as the
	// activity wrapper reads them (withAttempt), the message masked.
	_, err = typ.Run(context.Background(), Input{Node: "wrapped"})
	err = withAttempt(err, 2)
	assertNoSecret(t, "wrapped error", failureText(t, err))
	if !errors.As(err, &appErr) || appErr.Type() != errtype.BadInput || !appErr.NonRetryable() || appErr.Message() != "deploy: bad value \""+Mask+"\"" {
		t.Errorf("wrapped error %v: want a non-retryable %s, masked", err, errtype.BadInput)
	}
	_, err = typ.Run(context.Background(), Input{Node: "plain"})
	err = withAttempt(err, 1)
	assertNoSecret(t, "plain error", failureText(t, err))
	if !errors.As(err, &appErr) || appErr.Type() != errtype.NodeFailed || appErr.NonRetryable() {
		t.Errorf("plain error %v: want a retryable %s", err, errtype.NodeFailed)
	}
}
