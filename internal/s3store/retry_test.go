package s3store_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/retrain-ml/retrain/internal/s3store"
)

// slowDown is S3's answer to a client it wants to slow down.
const slowDown = `<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message><RequestId>r1</RequestId></Error>`

// flakyS3 answers HEAD bucket with 200 and each DELETE of an object with
// the next entry of script: a status (503 sends SlowDown), -1 to close
// the connection without an answer, or stall to read the request and
// never answer (until the client gives up on the connection).
// stall in a flakyS3 script: a server that takes the request and goes
// silent.
const stall = -2

type flakyS3 struct {
	mu      sync.Mutex
	script  []int
	deletes int
}

func (f *flakyS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return
	}
	f.mu.Lock()
	status := http.StatusNoContent
	if f.deletes < len(f.script) {
		status = f.script[f.deletes]
	}
	f.deletes++
	f.mu.Unlock()
	switch status {
	case stall:
		<-r.Context().Done()
	case -1:
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	case http.StatusServiceUnavailable:
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		w.Write([]byte(slowDown))
	default:
		w.WriteHeader(status)
	}
}

func (f *flakyS3) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deletes
}

func openFlaky(t *testing.T, f *flakyS3, maxAttempts int) (*s3store.Store, *bytes.Buffer, *[]s3store.RetryEvent) {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	var logs bytes.Buffer
	var mu sync.Mutex
	events := new([]s3store.RetryEvent)
	st, err := s3store.Open(t.Context(), s3store.Config{
		URI: "s3://bucket/p", Endpoint: srv.URL, Region: "us-east-1", UsePathStyle: true,
		AccessKeyID: "AKIDEXAMPLEEXAMPLE", SecretAccessKey: "secret-secret-secret-secret",
		MaxAttempts: maxAttempts, MaxBackoff: 10 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		OnRetry: func(ev s3store.RetryEvent) {
			mu.Lock()
			defer mu.Unlock()
			*events = append(*events, ev)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return st, &logs, events
}

// TestRetriesAreCountedAndLogged: a request answered 503 SlowDown, then
// with a closed connection, then 204 succeeds on its third attempt; both
// retries are counted, reported to OnRetry with the operation, bucket,
// key, attempt and reason, and logged at Warn.
func TestRetriesAreCountedAndLogged(t *testing.T) {
	f := &flakyS3{script: []int{http.StatusServiceUnavailable, -1}}
	st, logs, events := openFlaky(t, f, 0)
	if err := st.Delete(t.Context(), "k"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if f.count() != 3 || st.Retries() != 2 {
		t.Fatalf("server saw %d DELETEs, store counted %d retries; want 3 and 2", f.count(), st.Retries())
	}
	want := []struct {
		attempt int
		reason  string
		err     string
	}{{2, s3store.RetryThrottled, "SlowDown"}, {3, s3store.RetryConnection, "EOF"}}
	if len(*events) != len(want) {
		t.Fatalf("OnRetry got %+v, want %d events", *events, len(want))
	}
	for i, w := range want {
		ev := (*events)[i]
		if ev.Operation != "DeleteObject" || ev.Bucket != "bucket" || ev.Key != "p/k" || ev.Attempt != w.attempt || ev.Reason != w.reason || !strings.Contains(ev.Err, w.err) {
			t.Errorf("event %d = %+v; want DeleteObject of bucket/p/k, attempt %d, reason %s, error saying %q", i, ev, w.attempt, w.reason, w.err)
		}
	}
	var records []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		records = append(records, r)
	}
	if len(records) != 2 {
		t.Fatalf("want 2 warnings, got:\n%s", logs)
	}
	for i, r := range records {
		if r["level"] != "WARN" || r["operation"] != "DeleteObject" || r["key"] != "p/k" || r["attempt"] != float64(want[i].attempt) || r["reason"] != want[i].reason {
			t.Errorf("log record %d: %v", i, r)
		}
	}
	if strings.Contains(logs.String(), "secret-secret") {
		t.Errorf("log holds the secret:\n%s", logs)
	}
}

// TestRetriesEndAtMaxAttempts: a store that only ever answers SlowDown
// gets MaxAttempts requests and no more, and the error says SlowDown.
func TestRetriesEndAtMaxAttempts(t *testing.T) {
	f := &flakyS3{script: []int{503, 503, 503, 503, 503, 503, 503, 503}}
	st, _, events := openFlaky(t, f, 4)
	err := st.Delete(t.Context(), "k")
	var e *s3store.Error
	if !errors.As(err, &e) || e.Code != "SlowDown" || e.StatusCode != 503 {
		t.Fatalf("Delete = %v, want a SlowDown error", err)
	}
	if f.count() != 4 || len(*events) != 3 || st.Retries() != 3 {
		t.Fatalf("%d requests, %d retry events, %d counted; want 4, 3, 3", f.count(), len(*events), st.Retries())
	}
}

// TestOpenRefusesNegativeRetrySettings: bad input fails Open with a
// message naming the fields.
func TestOpenRefusesNegativeRetrySettings(t *testing.T) {
	_, err := s3store.Open(t.Context(), s3store.Config{URI: "s3://bucket", Endpoint: "http://127.0.0.1:1", MaxAttempts: -1})
	if err == nil || !strings.Contains(err.Error(), "MaxAttempts -1") {
		t.Fatalf("Open = %v, want an error naming MaxAttempts", err)
	}
}

// TestStalledRequestIsRetried: a server that reads a DELETE and never
// answers is given up on after ResponseHeaderTimeout and the request is
// sent again (counted with reason "timeout") instead of waiting for the
// caller's deadline; the second attempt's answer completes the Delete.
// Without the timeout the first attempt would wait until the context's
// 60 s deadline and the Delete would fail with it.
func TestStalledRequestIsRetried(t *testing.T) {
	f := &flakyS3{script: []int{stall}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	var reasons []string
	st, err := s3store.Open(t.Context(), s3store.Config{
		URI: "s3://bucket/p", Endpoint: srv.URL, Region: "us-east-1", UsePathStyle: true,
		AccessKeyID: "AKIDEXAMPLEEXAMPLE", SecretAccessKey: "secret-secret-secret-secret",
		MaxBackoff: 10 * time.Millisecond, ResponseHeaderTimeout: 200 * time.Millisecond,
		Logger:  slog.New(slog.DiscardHandler),
		OnRetry: func(ev s3store.RetryEvent) { reasons = append(reasons, ev.Reason) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := st.Delete(ctx, "k"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if f.count() != 2 || len(reasons) != 1 || reasons[0] != s3store.RetryTimeout {
		t.Fatalf("server saw %d DELETEs, retries %v; want 2 and one %q", f.count(), reasons, s3store.RetryTimeout)
	}
}

// TestOpenRefusesNegativeResponseHeaderTimeout: bad input fails Open and
// AWSConfig with a message naming the field.
func TestOpenRefusesNegativeResponseHeaderTimeout(t *testing.T) {
	cfg := s3store.Config{URI: "s3://bucket", Endpoint: "http://127.0.0.1:1", ResponseHeaderTimeout: -time.Second}
	if _, err := s3store.Open(t.Context(), cfg); err == nil || !strings.Contains(err.Error(), "ResponseHeaderTimeout -1s") {
		t.Fatalf("Open = %v, want an error naming ResponseHeaderTimeout", err)
	}
	if _, err := s3store.AWSConfig(t.Context(), cfg); err == nil || !strings.Contains(err.Error(), "ResponseHeaderTimeout -1s") {
		t.Fatalf("AWSConfig = %v, want an error naming ResponseHeaderTimeout", err)
	}
}

// TestAWSConfigCountsRetries: a client s3store does not build (as the
// lake's table IO builds its own) from AWSConfig follows the same policy:
// a SlowDown and a dropped connection are retried, counted by OnRetry
// with their reasons and logged, and the request succeeds.
func TestAWSConfigCountsRetries(t *testing.T) {
	f := &flakyS3{script: []int{http.StatusServiceUnavailable, -1}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	var logs bytes.Buffer
	var events []s3store.RetryEvent
	cfg, err := s3store.AWSConfig(t.Context(), s3store.Config{
		Endpoint: srv.URL, Region: "us-east-1",
		AccessKeyID: "AKIDEXAMPLEEXAMPLE", SecretAccessKey: "secret-secret-secret-secret",
		MaxBackoff: 10 * time.Millisecond,
		Logger:     slog.New(slog.NewTextHandler(&logs, nil)),
		OnRetry:    func(ev s3store.RetryEvent) { events = append(events, ev) },
	})
	if err != nil {
		t.Fatal(err)
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = true })
	if _, err := client.DeleteObject(t.Context(), &s3.DeleteObjectInput{Bucket: aws.String("lake"), Key: aws.String("t/data/f.parquet")}); err != nil {
		t.Fatalf("DeleteObject: %v", err)
	}
	if f.count() != 3 || len(events) != 2 || events[0].Reason != s3store.RetryThrottled || events[1].Reason != s3store.RetryConnection ||
		events[1].Bucket != "lake" || events[1].Key != "t/data/f.parquet" || events[1].Attempt != 3 {
		t.Fatalf("server saw %d DELETEs, retries %+v; want 3, a throttled and a connection retry of lake/t/data/f.parquet", f.count(), events)
	}
	if n := strings.Count(logs.String(), "s3store: retrying request"); n != 2 || strings.Contains(logs.String(), "secret-secret") {
		t.Fatalf("want 2 retry warnings without the secret, got:\n%s", logs.String())
	}
}
