// Package httpcheck is an example of a team's own node type: `http_check`
// requests a URL (a model server's health page, a feature service) and
// fails unless it answers with an expected status and, optionally, a body
// holding some text. Its outputs — status, latency, size and a digest of
// the body — flow to downstream nodes like any built-in node's.
package httpcheck

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/nodetype"
)

// Name is the node type's name in specs.
const Name = "http_check"

// CheckFailed is the error type of a check that got an answer it did not
// expect. It is retried under the node's retry policy: a server that is
// still starting answers differently a few seconds later.
const CheckFailed = "HTTPCheckFailed"

const (
	defaultTimeout = 10 * time.Second
	// maxBody bounds what is read of a body: plenty for a health page or a
	// model server's metadata; a bigger body fails the check rather than
	// fill the worker's memory.
	maxBody = 8 << 20
	// snippet is how much of an unexpected body an error quotes.
	snippet = 200
)

// Spec is what `with` takes and what the node outputs; the validator checks
// specs against it before any run starts.
var Spec = dags.NodeType{
	Name: Name,
	Doc:  "Requests a URL and fails unless the answer has an expected status (and text); outputs status, latency and a digest of the body.",
	Fields: []dags.Field{
		{Name: "url", Type: dags.FieldString, Required: true, Doc: "http or https URL"},
		{Name: "method", Type: dags.FieldString, Doc: "GET (default) or HEAD"},
		{Name: "expect_status", Type: dags.FieldIntList, Doc: "statuses that pass (default [200])"},
		{Name: "contains", Type: dags.FieldString, Doc: "text the body must contain (default: anything)"},
		{Name: "timeout", Type: dags.FieldDuration, Doc: "limit of one request (default 10s)"},
	},
	Outputs: []string{"status", "latency_ms", "bytes", "body_sha256", "content_type"},
	Check: func(with map[string]any) error {
		// Values holding ${...} are only known at run time; Run checks them.
		if s, ok := with["url"].(string); ok && !dags.HasRef(s) {
			if _, err := parseURL(s); err != nil {
				return err
			}
		}
		if m, ok := with["method"].(string); ok && !dags.HasRef(m) {
			if _, err := method(m); err != nil {
				return err
			}
		}
		return nil
	},
}

// With is the node's `with` block, decoded.
type With struct {
	URL          string `json:"url"`
	Method       string `json:"method"`
	ExpectStatus []int  `json:"expect_status"`
	Contains     string `json:"contains"`
	Timeout      string `json:"timeout"`
}

// Type returns the node type to hand to worker.WithNodeTypes. client makes
// the requests; nil means a client of its own.
func Type(client *http.Client) nodetype.Type {
	if client == nil {
		client = &http.Client{}
	}
	return nodetype.New(Spec, (&checker{client: client}).run)
}

type checker struct {
	client *http.Client
}

func (c *checker) run(ctx context.Context, in nodetype.Input, w With) (map[string]any, error) {
	u, err := parseURL(w.URL)
	if err != nil {
		return nil, nodetype.Permanent(nodetype.BadInput, "%v", err)
	}
	m, err := method(w.Method)
	if err != nil {
		return nil, nodetype.Permanent(nodetype.BadInput, "%v", err)
	}
	timeout := defaultTimeout
	if w.Timeout != "" {
		if timeout, err = dags.ParseDuration(w.Timeout); err != nil || timeout <= 0 {
			return nil, nodetype.Permanent(nodetype.BadInput, "timeout %q: want a positive duration such as 10s", w.Timeout)
		}
	}
	expect := w.ExpectStatus
	if len(expect) == 0 {
		expect = []int{http.StatusOK}
	}

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, m, u.String(), nil)
	if err != nil {
		return nil, nodetype.Permanent(nodetype.BadInput, "request %s: %v", u.Redacted(), err)
	}
	req.Header.Set("User-Agent", "retrain-http-check ("+in.Pipeline+"/"+in.Node+")")
	started := time.Now()
	resp, err := c.client.Do(req)
	if err != nil {
		// Refused connections and timeouts are worth a retry.
		return nil, fmt.Errorf("%s %s: %w", m, u.Redacted(), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	latency := time.Since(started)
	if err != nil {
		return nil, fmt.Errorf("%s %s: read body: %w", m, u.Redacted(), err)
	}
	if len(body) > maxBody {
		return nil, nodetype.Permanent(CheckFailed, "%s %s: body larger than %d MiB", m, u.Redacted(), maxBody>>20)
	}
	if !slices.Contains(expect, resp.StatusCode) {
		return nil, temporal.NewApplicationError(fmt.Sprintf("%s %s: status %d, want one of %v; body: %s",
			m, u.Redacted(), resp.StatusCode, expect, quote(body)), CheckFailed)
	}
	if w.Contains != "" && !bytes.Contains(body, []byte(w.Contains)) {
		return nil, temporal.NewApplicationError(fmt.Sprintf("%s %s: body does not contain %q; body: %s",
			m, u.Redacted(), w.Contains, quote(body)), CheckFailed)
	}
	return map[string]any{
		"status":       resp.StatusCode,
		"latency_ms":   latency.Milliseconds(),
		"bytes":        len(body),
		"body_sha256":  fmt.Sprintf("%x", sha256.Sum256(body)),
		"content_type": resp.Header.Get("Content-Type"),
	}, nil
}

func parseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("url %q: %v", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("url %q: want an http or https URL with a host", s)
	}
	return u, nil
}

func method(m string) (string, error) {
	switch strings.ToUpper(m) {
	case "", http.MethodGet:
		return http.MethodGet, nil
	case http.MethodHead:
		return http.MethodHead, nil
	}
	return "", fmt.Errorf("method %q: want GET or HEAD (a check must not change anything)", m)
}

// quote returns the start of a body for an error message.
func quote(b []byte) string {
	if len(b) > snippet {
		return fmt.Sprintf("%q...", b[:snippet])
	}
	return fmt.Sprintf("%q", b)
}
