package s3store_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/internal/s3store"
)

// assertNoSecrets checks err, everything it wraps and every way of
// formatting it for the given secrets. Temporal records the whole Unwrap
// chain of an activity error, so every link matters.
func assertNoSecrets(t *testing.T, err error, secrets ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("no error to check")
	}
	var texts []string
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		texts = append(texts, e.Error(), fmt.Sprintf("%+v", e), fmt.Sprintf("%#v", e))
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	for _, text := range texts {
		for _, s := range secrets {
			if s != "" && strings.Contains(text, s) {
				t.Errorf("error text contains secret %q: %s", s, text)
			}
		}
	}
}

// TestErrorsNeverContainCredentials points a Store at a server that echoes
// the request's credentials (the Authorization header carries the access
// key, X-Amz-Security-Token the session token) and the secret itself into
// its error messages, as a misbehaving proxy might, and checks the errors
// and the debug logs.
func TestErrorsNeverContainCredentials(t *testing.T) {
	const (
		access = "AKIAECHOEDACCESSKEY1"
		secret = "echoed/Secret+Key/abcdefghijklmnopqrstu"
		token  = "EchoedSessionToken0123456789"
	)
	for _, status := range []int{http.StatusForbidden, http.StatusBadRequest, http.StatusInternalServerError} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodHead && r.URL.Path == "/echo-bucket" {
					return // the bucket exists; every later request fails
				}
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(status)
				fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>EchoError</Code><Message>auth=%s token=%s secret=%s</Message><RequestId>r1</RequestId></Error>`,
					r.Header.Get("Authorization"), r.Header.Get("X-Amz-Security-Token"), secret)
			}))
			defer srv.Close()
			cfg := s3store.Config{
				URI:             "s3://echo-bucket/p",
				Endpoint:        srv.URL,
				Region:          "us-east-1",
				UsePathStyle:    true,
				AccessKeyID:     access,
				SecretAccessKey: secret,
				SessionToken:    token,
				// A 500 is retried: quickly, and the retry warnings are
				// among the logs checked below.
				MaxBackoff: 10 * time.Millisecond,
			}
			var logs bytes.Buffer
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			st, err := s3store.Open(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, err = st.PutBytes(t.Context(), "k", []byte("v"))
			if err == nil {
				t.Fatal("Put succeeded against a failing server")
			}
			t.Log(err)
			assertNoSecrets(t, err, access, secret, token)
			var e *s3store.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T is not an *s3store.Error", err)
			}
			if !strings.Contains(err.Error(), "[REDACTED]") {
				t.Errorf("echoed credentials were not redacted but dropped: %v", err)
			}
			for _, secret := range []string{access, secret, token} {
				if strings.Contains(logs.String(), secret) {
					t.Errorf("logs contain %q:\n%s", secret, logs.String())
				}
			}
		})
	}
}
