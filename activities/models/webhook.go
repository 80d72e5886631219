package models

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/retrain-ml/retrain/activities/progenv"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/nodetype"
)

const (
	defaultWebhookBackoff = time.Second
	webhookTimeout        = 10 * time.Second
)

// webhookEvent is the JSON body POSTed to a deploy's webhooks.
type webhookEvent struct {
	Model           string    `json:"model"`
	Alias           string    `json:"alias"`
	Version         string    `json:"version"`
	PreviousVersion string    `json:"previous_version"`
	Checksum        string    `json:"checksum"`
	URI             string    `json:"uri"` // where the artifact files are
	Seq             int64     `json:"seq"` // the alias history entry of the move
	Pipeline        string    `json:"pipeline"`
	Run             string    `json:"run_id"`
	Time            time.Time `json:"time"`
}

// WebhookResult is what a deploy reports about one webhook.
type WebhookResult struct {
	URL      string `json:"url"` // without credentials or query
	Status   int    `json:"status,omitempty"`
	Attempts int    `json:"attempts"`
	Error    string `json:"error,omitempty"`
}

// notify POSTs ev to every webhook at once and reports each outcome. A
// serving system reloads on the call; at-least-once delivery is fine, since
// the event names the version and a reload of the same version is a no-op.
func (m *Models) notify(ctx context.Context, w DeployWith, ev webhookEvent, log *slog.Logger) []WebhookResult {
	body, _ := json.Marshal(ev)
	results := make([]WebhookResult, len(w.Webhooks))
	var wg sync.WaitGroup
	for i, hook := range w.Webhooks {
		wg.Go(func() {
			results[i] = m.post(ctx, dags.PointerTo("webhooks", strconv.Itoa(i)), hook, body, w.WebhookAttempts)
			if r := results[i]; r.Error != "" {
				log.Warn("webhook failed; the deploy stands", "url", r.URL, "attempts", r.Attempts, "error", r.Error)
			} else {
				log.Info("webhook notified", "url", r.URL, "status", r.Status, "attempts", r.Attempts)
			}
		})
	}
	wg.Wait()
	return results
}

// post sends body to hook, retrying transport errors, 5xx and 429 with
// exponential backoff.
func (m *Models) post(ctx context.Context, path, hook string, body []byte, attempts int) (res WebhookResult) {
	// The result shows the URL as written, ${secret.NAME} and all; only
	// the request gets the values, and errors have them masked.
	res = WebhookResult{URL: displayURL(hook)}
	if err := secretInHost(ctx, path, hook); err != nil {
		res.Error = err.Error()
		return res
	}
	hook, secrets, err := m.Env.ResolveString(ctx, path, hook)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer func() { res.Error = progenv.MaskString(res.Error, secrets) }()
	client := m.HTTP
	if client == nil {
		client = &http.Client{Timeout: webhookTimeout}
	}
	wait := m.webhookBackoff
	if wait == 0 {
		wait = defaultWebhookBackoff
	}
	for res.Attempts < attempts {
		res.Attempts++
		status, err := postOnce(ctx, client, hook, body)
		res.Status = status
		switch {
		case err == nil && status/100 == 2:
			res.Error = ""
			return res
		case err != nil:
			res.Error = err.Error()
		default:
			res.Error = fmt.Sprintf("HTTP %d", status)
			if status/100 == 4 && status != http.StatusTooManyRequests && status != http.StatusRequestTimeout {
				return res // the request itself is wrong: another try gets the same answer
			}
		}
		if res.Attempts == attempts {
			break
		}
		select {
		case <-ctx.Done():
			res.Error += "; " + ctx.Err().Error()
			return res
		case <-time.After(wait):
		}
		wait *= 2
	}
	return res
}

func postOnce(ctx context.Context, client *http.Client, hook string, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hook, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "retrain-deploy")
	resp, err := client.Do(req)
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = ue.Err // its message holds the URL, query and all
	}
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
	return resp.StatusCode, nil
}

func checkWebhook(s string) error {
	u, err := url.Parse(progenv.Placeholders(s)) // a secret's value is known only on the worker
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("webhook %q is not an http(s) URL", displayURL(s))
	}
	return nil
}

// hostRange returns the offsets of the host (and port) of the URL s: the
// authority after "scheme://", less any user information.
func hostRange(s string) (from, to int) {
	i := strings.Index(s, "://")
	if i < 0 {
		return 0, 0
	}
	from = i + 3
	to = len(s)
	if j := strings.IndexAny(s[from:], "/?#"); j >= 0 {
		to = from + j
	}
	if at := strings.LastIndexByte(s[from:to], '@'); at >= 0 {
		from += at + 1
	}
	return from, to
}

// secretInHost refuses spans of secret references that lie in the host
// of hook: checked at validation for the spec's text, and here again for
// what the run resolved, whose host a param may have supplied.
func secretInHost(ctx context.Context, path, hook string) error {
	from, to := hostRange(hook)
	for _, sp := range nodetype.SecretSpans(ctx, path) {
		if sp.Start < to && sp.Start+len(dags.SecretText(sp.Name)) > from {
			return nodetype.Permanent(errtype.BadInput, "webhook %s: secret %s is in the host; refused without sending anything", displayURL(hook), sp.Name)
		}
	}
	return nil
}

// displayURL drops what may be a secret from a webhook URL (user
// information, the query) before it is logged or recorded in outputs.
func displayURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(invalid URL)"
	}
	u.User = nil
	if u.RawQuery != "" {
		u.RawQuery = "..."
	}
	u.Fragment = ""
	return u.String()
}

// PostJSON POSTs body as JSON to every hook at once, as a deploy's
// webhooks are sent (attempts each, retried with backoff, ${secret.NAME}
// resolved on the worker and masked in errors), and reports each outcome.
// path names the hooks' list in the node's `with` block ("webhooks").
func (m *Models) PostJSON(ctx context.Context, path string, hooks []string, attempts int, body any, log *slog.Logger) []WebhookResult {
	b, err := json.Marshal(body)
	results := make([]WebhookResult, len(hooks))
	if err != nil {
		for i, h := range hooks {
			results[i] = WebhookResult{URL: displayURL(h), Error: "encode body: " + err.Error()}
		}
		return results
	}
	var wg sync.WaitGroup
	for i, hook := range hooks {
		wg.Go(func() {
			results[i] = m.post(ctx, dags.PointerTo(path, strconv.Itoa(i)), hook, b, attempts)
			if r := results[i]; r.Error != "" {
				log.Warn("webhook failed", "url", r.URL, "attempts", r.Attempts, "error", r.Error)
			} else {
				log.Info("webhook notified", "url", r.URL, "status", r.Status, "attempts", r.Attempts)
			}
		})
	}
	wg.Wait()
	return results
}

// CheckWebhook refuses, before any run, a webhook that is not an http(s)
// URL or holds a secret in its host.
func CheckWebhook(s string) error {
	if !dags.HasRef(s) {
		if err := checkWebhook(s); err != nil {
			return err
		}
	}
	if from, to := hostRange(s); strings.Contains(s[from:to], "${secret.") {
		return fmt.Errorf("webhook %q: a secret may not be in the host; put it in the path, query or user information", displayURL(s))
	}
	return nil
}
