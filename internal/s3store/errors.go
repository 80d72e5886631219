package s3store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
)

// Sentinel errors. Test for them with errors.Is; every error a Store returns
// is an [*Error] that wraps at most one of them.
var (
	// ErrInvalidKey: a key or prefix broke the rules of [ValidateKey]. No
	// request was sent.
	ErrInvalidKey = errors.New("s3store: invalid key")
	// ErrNotFound: the object does not exist.
	ErrNotFound = errors.New("s3store: object not found")
	// ErrPreconditionFailed: a conditional write lost (HTTP 412, or 409
	// ConditionalRequestConflict when two conditional writes raced).
	ErrPreconditionFailed = errors.New("s3store: precondition failed")
	// ErrExists: PutIfAbsent found the key already taken. It is an
	// ErrPreconditionFailed.
	ErrExists error = &sentinel{"s3store: object already exists", ErrPreconditionFailed}
	// ErrETagMismatch: PutIfMatch found another version of the object. It is
	// an ErrPreconditionFailed.
	ErrETagMismatch error = &sentinel{"s3store: object changed (ETag mismatch)", ErrPreconditionFailed}
	// ErrChecksumMismatch: the bytes read or written do not match the
	// checksum the server recorded.
	ErrChecksumMismatch = errors.New("s3store: checksum mismatch")
	// ErrAccessDenied: the server refused the credentials or the request.
	ErrAccessDenied = errors.New("s3store: access denied")
	// ErrNoSuchBucket: the configured bucket does not exist.
	ErrNoSuchBucket = errors.New("s3store: no such bucket")
	// ErrUnreachable: no response came back from the endpoint.
	ErrUnreachable = errors.New("s3store: endpoint unreachable")
	// ErrNotImplemented: the server does not support the operation.
	ErrNotImplemented = errors.New("s3store: not implemented by server")
)

type sentinel struct {
	msg    string
	parent error
}

func (s *sentinel) Error() string { return s.msg }
func (s *sentinel) Unwrap() error { return s.parent }

// Error describes a failed Store operation.
//
// It deliberately holds no reference to the underlying SDK error: Temporal
// records an error's whole Unwrap chain in workflow history, and SDK errors
// carry request details that are not ours to publish. Msg is built from the
// SDK error with the Store's credentials removed.
type Error struct {
	Op         string // operation: "open", "put", "put-if-absent", "get", ...
	Path       string // s3:// URI the operation addressed; empty for "open"
	StatusCode int    // HTTP status, 0 when no response arrived
	Code       string // S3 error code, such as "PreconditionFailed"
	RequestID  string // server request id, for the storage operator
	Msg        string // description of the failure, free of credentials

	kind   error // one of the sentinel errors, or nil
	ctxErr error // context.Canceled or context.DeadlineExceeded, or nil
}

func (e *Error) Error() string {
	if e.Path == "" {
		return "s3store: " + e.Msg
	}
	return "s3store: " + e.Op + " " + e.Path + ": " + e.Msg
}

// Unwrap returns the sentinel error classifying e and the context error that
// ended the operation, if any.
func (e *Error) Unwrap() []error {
	var errs []error
	if e.kind != nil {
		errs = append(errs, e.kind)
	}
	if e.ctxErr != nil {
		errs = append(errs, e.ctxErr)
	}
	return errs
}

// redactor removes credentials from text that may end up in errors or logs.
type redactor struct{ r *strings.Replacer }

func newRedactor(secrets ...string) redactor {
	var pairs []string
	for _, s := range secrets {
		// Values this short cannot be told apart from ordinary words; real
		// access keys and secrets are 16 characters and more.
		if len(s) >= 4 {
			pairs = append(pairs, s, "[REDACTED]")
		}
	}
	return redactor{strings.NewReplacer(pairs...)}
}

func (r redactor) String(s string) string {
	if r.r == nil {
		return s
	}
	return r.r.Replace(s)
}

// wrap converts an SDK error from operation op on path into an *Error.
func (s *Store) wrap(op, path string, err error) error { return wrapErr(s.redact, op, path, err) }

// wrapErr is Store.wrap for callers without a Store (retry counting of
// another client's requests), with credentials removed by redact.
func wrapErr(redact redactor, op, path string, err error) error {
	if err == nil {
		return nil
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e
	}
	e := &Error{Op: op, Path: path}
	var detail string
	if re, ok := errors.AsType[*awshttp.ResponseError](err); ok {
		e.StatusCode = re.HTTPStatusCode()
		e.RequestID = re.ServiceRequestID()
	}
	if ae, ok := errors.AsType[smithy.APIError](err); ok {
		e.Code = ae.ErrorCode()
		detail = ae.ErrorMessage()
	}
	switch {
	case errors.Is(err, context.Canceled):
		e.ctxErr = context.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		e.ctxErr = context.DeadlineExceeded
	}
	e.kind = classify(op, e.StatusCode, e.Code)

	switch {
	case e.ctxErr != nil:
		detail = e.ctxErr.Error()
		if e.ctxErr == context.DeadlineExceeded && e.StatusCode == 0 && e.Code == "" {
			// No answer before the deadline: the SDK was still retrying a
			// connection that never came up (on a loaded machine a refused
			// dial can retry until then). That is an unreachable endpoint.
			e.kind = ErrUnreachable
			if ne, ok := errors.AsType[*net.OpError](err); ok {
				detail = "no answer before the deadline; last error: " + ne.Error()
			} else {
				detail = "no answer before the deadline"
			}
		}
	case e.StatusCode == 0 && e.Code == "":
		// No response: the SDK's message is a long chain of retries and
		// middleware names; the network error at its root is the useful part.
		if ne, ok := errors.AsType[*net.OpError](err); ok {
			detail = ne.Error()
		} else if de, ok := errors.AsType[*net.DNSError](err); ok {
			detail = de.Error()
		} else {
			detail = err.Error()
		}
		e.kind = ErrUnreachable
	case detail == "":
		// HEAD responses have no body, hence no message.
		detail = http.StatusText(e.StatusCode)
	}
	e.Msg = redact.String(describe(e, detail))
	return e
}

// classify maps an HTTP status and S3 error code to a sentinel error. The
// code is more specific than the status, so it is looked at first.
func classify(op string, status int, code string) error {
	precondition := ErrPreconditionFailed
	switch op {
	case opPutIfAbsent:
		precondition = ErrExists
	case opPutIfMatch:
		precondition = ErrETagMismatch
	}
	switch code {
	case "NoSuchBucket":
		return ErrNoSuchBucket
	case "NoSuchKey", "NotFound":
		return ErrNotFound
	case "PreconditionFailed", "ConditionalRequestConflict":
		return precondition
	case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch",
		"XAdminUserNotFound": // versitygw's answer to an unknown access key
		return ErrAccessDenied
	case "NotImplemented":
		return ErrNotImplemented
	}
	switch status {
	case http.StatusNotFound:
		return ErrNotFound
	case http.StatusPreconditionFailed:
		return precondition
	case http.StatusForbidden:
		return ErrAccessDenied
	case http.StatusNotImplemented:
		return ErrNotImplemented
	}
	return nil
}

func describe(e *Error, detail string) string {
	var b strings.Builder
	switch e.kind {
	case ErrExists:
		b.WriteString("object already exists")
	case ErrETagMismatch:
		b.WriteString("object changed since it was read (ETag mismatch)")
	case ErrNotFound:
		b.WriteString("not found")
	case ErrAccessDenied:
		b.WriteString("access denied: check credentials")
	case ErrNoSuchBucket:
		b.WriteString("bucket does not exist")
	case ErrNotImplemented:
		b.WriteString("not implemented by the server")
	default:
		b.WriteString(detail)
		detail = ""
	}
	if detail != "" && detail != b.String() && detail != http.StatusText(e.StatusCode) {
		b.WriteString(": ")
		b.WriteString(detail)
	}
	if e.StatusCode != 0 || e.Code != "" {
		fmt.Fprintf(&b, " (HTTP %d", e.StatusCode)
		if e.Code != "" {
			b.WriteString(" " + e.Code)
		}
		if e.RequestID != "" {
			b.WriteString(", request id " + e.RequestID)
		}
		b.WriteString(")")
	}
	return b.String()
}

// newError returns an *Error that did not come from the SDK.
func newError(op, path string, kind error, msg string) *Error {
	return &Error{Op: op, Path: path, Msg: msg, kind: kind}
}
