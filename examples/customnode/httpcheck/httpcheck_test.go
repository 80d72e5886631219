package httpcheck

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/nodetype"
)

func TestHTTPCheck(t *testing.T) {
	const healthy = `{"status":"serving","model":"ctr","version":"v7"}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, healthy)
		case "/big":
			w.Write(make([]byte, maxBody+1))
		default:
			http.Error(w, "no such model", http.StatusNotFound)
		}
	}))
	defer srv.Close()
	typ := Type(srv.Client())
	run := func(with map[string]any) (map[string]any, error) {
		return typ.Run(context.Background(), nodetype.Input{Pipeline: "p", Node: "check", Type: Name, With: with})
	}

	out, err := run(map[string]any{"url": srv.URL + "/health", "contains": `"serving"`})
	if err != nil {
		t.Fatal(err)
	}
	// Outputs arrive as they will in the run's history: JSON numbers.
	if out["status"] != 200.0 || out["bytes"] != float64(len(healthy)) || out["content_type"] != "application/json" ||
		out["body_sha256"] != fmt.Sprintf("%x", sha256.Sum256([]byte(healthy))) {
		t.Errorf("outputs %v", out)
	}
	if ms, ok := out["latency_ms"].(float64); !ok || ms < 0 {
		t.Errorf("latency_ms %v", out["latency_ms"])
	}

	// 404 passes when expected.
	if out, err := run(map[string]any{"url": srv.URL + "/gone", "expect_status": []any{404.0}}); err != nil || out["status"] != 404.0 {
		t.Errorf("expected 404: %v, %v", out, err)
	}

	failures := []struct {
		name      string
		with      map[string]any
		errType   string
		retryable bool
		inMessage string
	}{
		{"wrong status", map[string]any{"url": srv.URL + "/gone"}, CheckFailed, true, `status 404, want one of [200]; body: "no such model\n"`},
		{"missing text", map[string]any{"url": srv.URL + "/health", "contains": "draining"}, CheckFailed, true, `does not contain "draining"`},
		{"body too big", map[string]any{"url": srv.URL + "/big"}, CheckFailed, false, "larger than 8 MiB"},
		{"not http", map[string]any{"url": "file:///etc/passwd"}, nodetype.BadInput, false, "want an http or https URL"},
		{"unsafe method", map[string]any{"url": srv.URL, "method": "POST"}, nodetype.BadInput, false, "want GET or HEAD"},
		{"bad timeout", map[string]any{"url": srv.URL, "timeout": "0s"}, nodetype.BadInput, false, "positive duration"},
		{"wrong with type", map[string]any{"url": srv.URL, "expect_status": "200"}, nodetype.BadInput, false, "expect_status"},
	}
	for _, f := range failures {
		t.Run(f.name, func(t *testing.T) {
			_, err := run(f.with)
			var appErr *temporal.ApplicationError
			if !errors.As(err, &appErr) || appErr.Type() != f.errType || appErr.NonRetryable() == f.retryable {
				t.Fatalf("error %v, want type %s, retryable %v", err, f.errType, f.retryable)
			}
			if !strings.Contains(err.Error(), f.inMessage) {
				t.Errorf("error %q does not say %q", err, f.inMessage)
			}
		})
	}

	// A server that is down is a plain error, retried by the node's policy.
	srv.Close()
	if _, err := run(map[string]any{"url": srv.URL + "/health"}); err == nil || !strings.Contains(err.Error(), "GET "+srv.URL) {
		t.Errorf("closed server: %v", err)
	}
}

func TestSpecCheck(t *testing.T) {
	for with, want := range map[string]string{
		"http://127.0.0.1:8233/":    "",
		"${params.url}":             "", // known at run time only
		"localhost:8233":            "want an http or https URL",
		"https://":                  "want an http or https URL",
		"http://host/${params.x}":   "",
		"ftp://example.com/file.gz": "want an http or https URL",
	} {
		err := Spec.Check(map[string]any{"url": with})
		if (err == nil) != (want == "") || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("Check(url %q) = %v, want %q", with, err, want)
		}
	}
	if err := Spec.Check(map[string]any{"url": "http://x/", "method": "DELETE"}); err == nil {
		t.Error("Check accepted DELETE")
	}
}

// TestTypeDeclaredByStructs: the fields the validator checks and the
// outputs it accepts come from With and Outputs.
func TestTypeDeclaredByStructs(t *testing.T) {
	nt := Type(nil).NodeType
	fields := map[string]dags.Field{}
	for _, f := range nt.Fields {
		fields[f.Name] = f
	}
	if f := fields["url"]; !f.Required || f.Type != dags.FieldString {
		t.Errorf("url: %+v", f)
	}
	if f := fields["timeout"]; f.Type != dags.FieldDuration || f.Default != "10s" {
		t.Errorf("timeout: %+v", f)
	}
	if f := fields["expect_status"]; f.Type != dags.FieldIntList || f.Default != "[200]" {
		t.Errorf("expect_status: %+v", f)
	}
	if !slices.Equal(nt.Outputs, []string{"status", "latency_ms", "bytes", "body_sha256", "content_type"}) {
		t.Errorf("outputs %v", nt.Outputs)
	}
}
