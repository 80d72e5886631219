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
	// maxBody bounds what is read of a body: plenty for a health page or a
	// model server's metadata; a bigger body fails the check rather than
	// fill the worker's memory.
	maxBody = 8 << 20
	// snippet is how much of an unexpected body an error quotes.
	snippet = 200
)

// Spec names and documents the node type and checks what the field types
// cannot; its fields and outputs come from With and Outputs (nodetype.New
// derives them), so the validator checks specs against them before any run
// starts.
var Spec = dags.NodeType{
	Name: Name,
	Doc:  "Requests a URL and fails unless the answer has an expected status (and text); outputs status, latency and a digest of the body.",
	Check: func(with map[string]any) error {
		// Values holding ${...} are only known at run time; run checks them.
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

// With is the node's `with` block: the one declaration of its fields,
// their types, defaults and docs.
type With struct {
	URL          string `json:"url" required:"true" doc:"http or https URL"`
	Method       string `json:"method" default:"GET" doc:"GET or HEAD"`
	ExpectStatus []int  `json:"expect_status" default:"[200]" doc:"statuses that pass"`
	Contains     string `json:"contains" doc:"text the body must contain (default: anything)"`
	Timeout      string `json:"timeout" type:"duration" default:"10s" doc:"limit of one request"`
}

// Outputs are what a node outputs, for downstream ${nodes.ID.outputs.KEY}.
type Outputs struct {
	Status      int    `json:"status"`
	LatencyMS   int64  `json:"latency_ms"`
	Bytes       int    `json:"bytes"`
	BodySHA256  string `json:"body_sha256"`
	ContentType string `json:"content_type"`
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

func (c *checker) run(ctx context.Context, in nodetype.Input, w With) (Outputs, error) {
	u, err := parseURL(w.URL)
	if err != nil {
		return Outputs{}, nodetype.Permanent(nodetype.BadInput, "%v", err)
	}
	m, err := method(w.Method)
	if err != nil {
		return Outputs{}, nodetype.Permanent(nodetype.BadInput, "%v", err)
	}
	timeout, err := dags.ParseDuration(w.Timeout)
	if err != nil || timeout <= 0 {
		return Outputs{}, nodetype.Permanent(nodetype.BadInput, "timeout %q: want a positive duration such as 10s", w.Timeout)
	}
	expect := w.ExpectStatus
	if len(expect) == 0 {
		return Outputs{}, nodetype.Permanent(nodetype.BadInput, "expect_status is empty: nothing could pass")
	}

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, m, u.String(), nil)
	if err != nil {
		return Outputs{}, nodetype.Permanent(nodetype.BadInput, "request %s: %v", u.Redacted(), err)
	}
	req.Header.Set("User-Agent", "retrain-http-check ("+in.Pipeline+"/"+in.Node+")")
	started := time.Now()
	resp, err := c.client.Do(req)
	if err != nil {
		// Refused connections and timeouts are worth a retry.
		return Outputs{}, fmt.Errorf("%s %s: %w", m, u.Redacted(), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	latency := time.Since(started)
	if err != nil {
		return Outputs{}, fmt.Errorf("%s %s: read body: %w", m, u.Redacted(), err)
	}
	if len(body) > maxBody {
		return Outputs{}, nodetype.Permanent(CheckFailed, "%s %s: body larger than %d MiB", m, u.Redacted(), maxBody>>20)
	}
	if !slices.Contains(expect, resp.StatusCode) {
		return Outputs{}, temporal.NewApplicationError(fmt.Sprintf("%s %s: status %d, want one of %v; body: %s",
			m, u.Redacted(), resp.StatusCode, expect, quote(body)), CheckFailed)
	}
	if w.Contains != "" && !bytes.Contains(body, []byte(w.Contains)) {
		return Outputs{}, temporal.NewApplicationError(fmt.Sprintf("%s %s: body does not contain %q; body: %s",
			m, u.Redacted(), w.Contains, quote(body)), CheckFailed)
	}
	return Outputs{
		Status:      resp.StatusCode,
		LatencyMS:   latency.Milliseconds(),
		Bytes:       len(body),
		BodySHA256:  fmt.Sprintf("%x", sha256.Sum256(body)),
		ContentType: resp.Header.Get("Content-Type"),
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
