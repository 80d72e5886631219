package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
)

const (
	testAccessKey = "AKIDEXAMPLEACCESSKEY"
	testSecret    = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	testToken     = "FwoGZXIvYXdzEXAMPLESESSIONTOKEN"
)

func TestConfigFormattingHidesSecrets(t *testing.T) {
	cfg := Config{
		URI:             "s3://bucket/p",
		Endpoint:        "http://user:endpointpassword@127.0.0.1:9000",
		AccessKeyID:     testAccessKey,
		SecretAccessKey: testSecret,
		SessionToken:    testToken,
	}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("config", "cfg", cfg)
	slog.New(slog.NewTextHandler(&logs, nil)).Info("config", "cfg", cfg)
	outputs := map[string]string{
		"%v":   fmt.Sprintf("%v", cfg),
		"%+v":  fmt.Sprintf("%+v", cfg),
		"%#v":  fmt.Sprintf("%#v", cfg),
		"%s":   fmt.Sprintf("%s", cfg),
		"&%+v": fmt.Sprintf("%+v", &cfg),
		"slog": logs.String(),
	}
	for verb, out := range outputs {
		for _, secret := range []string{testAccessKey, testSecret, testToken, "endpointpassword"} {
			if strings.Contains(out, secret) {
				t.Errorf("%s formatting of Config leaks %q: %s", verb, secret, out)
			}
		}
	}
	if !strings.Contains(outputs["%v"], "s3://bucket/p") {
		t.Errorf("%%v formatting lost the URI: %s", outputs["%v"])
	}
}

func TestRedactor(t *testing.T) {
	r := newRedactor(testSecret, "", "abc", testAccessKey)
	in := "sig " + testSecret + " key=" + testAccessKey + " abc stays"
	got := r.String(in)
	if strings.Contains(got, testSecret) || strings.Contains(got, testAccessKey) {
		t.Errorf("redacted %q", got)
	}
	if !strings.Contains(got, "abc stays") {
		t.Errorf("redactor removed a short non-secret: %q", got)
	}
}

func TestErrorUnwrapsOnlySentinels(t *testing.T) {
	e := &Error{Op: opPutIfAbsent, Path: "s3://b/k", Msg: "object already exists", kind: ErrExists}
	if !errors.Is(e, ErrExists) || !errors.Is(e, ErrPreconditionFailed) {
		t.Errorf("ErrExists error does not match its sentinels")
	}
	if errors.Is(e, ErrETagMismatch) {
		t.Errorf("ErrExists error matches ErrETagMismatch")
	}
	if got, want := e.Error(), "s3store: put-if-absent s3://b/k: object already exists"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// TestDeadlineWithoutAnswerIsUnreachable: when the SDK is still retrying a
// refused connection as the deadline passes, the error is a deadline, but
// what the caller needs to hear is that the endpoint did not answer.
func TestDeadlineWithoutAnswerIsUnreachable(t *testing.T) {
	s := &Store{}
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	err := s.wrap(opOpen, "s3://b", fmt.Errorf("retrying: %w; %w", dial, context.DeadlineExceeded))
	if !errors.Is(err, ErrUnreachable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v: want ErrUnreachable and DeadlineExceeded", err)
	}
	if !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("%v does not name the last network error", err)
	}
}
