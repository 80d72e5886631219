// Package webhook sends JSON events to webhooks the way every alias move
// is told to a serving system: each URL POSTed at once, transport errors,
// 5xx, 408 and 429 retried with exponential backoff, other 4xx not, and
// secret values held by a URL never shown (results name the URL without
// user information or query; errors have the values masked).
//
// It resolves nothing itself: a caller turns a URL as written (with its
// ${secret.NAME} references) into a [Target], deciding which references
// may resolve and from where (a worker's secrets for a node's webhooks,
// the caller's own for a model's webhooks, see [ResolveAll]).
package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	// DefaultBackoff is the wait before a webhook's second attempt,
	// doubled for each further one.
	DefaultBackoff = time.Second
	// DefaultTimeout bounds one request when the Sender has no client.
	DefaultTimeout = 10 * time.Second
	// DefaultAttempts is how often a webhook is tried unless told.
	DefaultAttempts = 3
	// UserAgent is sent with every request.
	UserAgent = "retrain-deploy"
)

// Result is what became of one webhook.
type Result struct {
	URL      string `json:"url"` // without credentials or query
	Status   int    `json:"status,omitempty"`
	Attempts int    `json:"attempts"`
	Error    string `json:"error,omitempty"`
}

// OK reports whether the webhook answered 2xx.
func (r Result) OK() bool { return r.Error == "" }

// Target is one webhook ready to send.
type Target struct {
	// Written is the URL as written, ${secret.NAME} and all: what
	// results show (less user information and query).
	Written string
	// URL is what is requested: Written with its secrets resolved.
	URL string
	// Secrets are the values URL holds, masked in every error.
	Secrets []string
	// Err, when set, is why the URL could not be resolved: the target is
	// reported as failed without a request.
	Err error
}

// Sender POSTs events.
type Sender struct {
	// HTTP sends the requests; nil is a client with DefaultTimeout.
	HTTP *http.Client
	// Backoff is the wait before a second attempt; 0 is DefaultBackoff.
	Backoff time.Duration
	// Log gets a line per webhook; nil logs nothing.
	Log *slog.Logger
}

// Send POSTs body (JSON) to every target at once, each up to attempts
// times, and reports each outcome in the targets' order.
func (s Sender) Send(ctx context.Context, targets []Target, attempts int, body []byte) []Result {
	results := make([]Result, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Go(func() {
			results[i] = s.post(ctx, t, max(attempts, 1), body)
			if s.Log == nil {
				return
			}
			if r := results[i]; r.Error != "" {
				s.Log.Warn("webhook failed", "url", r.URL, "attempts", r.Attempts, "error", r.Error)
			} else {
				s.Log.Info("webhook notified", "url", r.URL, "status", r.Status, "attempts", r.Attempts)
			}
		})
	}
	wg.Wait()
	return results
}

func (s Sender) post(ctx context.Context, t Target, attempts int, body []byte) (res Result) {
	res = Result{URL: DisplayURL(t.Written)}
	defer func() { res.Error = maskSecrets(res.Error, t.Secrets) }()
	if t.Err != nil {
		res.Error = t.Err.Error()
		return res
	}
	client := s.HTTP
	if client == nil {
		client = &http.Client{Timeout: DefaultTimeout}
	}
	wait := s.Backoff
	if wait == 0 {
		wait = DefaultBackoff
	}
	for res.Attempts < attempts {
		res.Attempts++
		status, err := postOnce(ctx, client, t.URL, body)
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
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err // its message holds the URL, query and all
		}
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", UserAgent)
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

// DisplayURL drops what may be a secret from a webhook URL (user
// information, the query) before it is logged or recorded.
func DisplayURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		// ${secret.NAME} in the user information or host: cut by hand
		// what the parse would have.
		i := strings.Index(s, "://")
		if _, perr := url.Parse(Placeholders(s)); perr != nil || i < 0 {
			return "(invalid URL)"
		}
		from, _ := HostRange(s)
		shown, _, _ := strings.Cut(s[:i+3]+s[from:], "#")
		if before, _, ok := strings.Cut(shown, "?"); ok {
			shown = before + "?..."
		}
		return shown
	}
	u.User = nil
	if u.RawQuery != "" {
		u.RawQuery = "..."
	}
	u.Fragment = ""
	return u.String()
}

// HostRange returns the offsets of the host (and port) of the URL s: the
// authority after "scheme://", less any user information.
func HostRange(s string) (from, to int) {
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

// secretRe is a ${secret.NAME} reference; $${...} is text.
var secretRe = regexp.MustCompile(`\$?\$\{secret\.([A-Za-z0-9_]+)\}`)

// Placeholders replaces each ${secret.NAME} in s with the word "secret",
// for checks of a URL's shape made where secrets are not known.
func Placeholders(s string) string {
	return secretRe.ReplaceAllStringFunc(s, func(m string) string {
		if strings.HasPrefix(m, "$$") {
			return m
		}
		return "secret"
	})
}

// CheckShape refuses a webhook that is not an http(s) URL once its
// ${secret.NAME} references are filled in (secret values are known only
// where it is sent).
func CheckShape(s string) error {
	u, err := url.Parse(Placeholders(s))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("webhook %q is not an http(s) URL", DisplayURL(s))
	}
	return nil
}

// ErrSecretInHost: a URL's host holds a secret reference. The request,
// and a DNS lookup of it, would send the secret to whoever the name
// points at.
var ErrSecretInHost = errors.New("a secret may not be in the host (the request, and a DNS lookup of it, would send it to whoever the name points at); put it in the path, query or user information")

// CheckURL refuses a webhook that is not an http(s) URL once its
// ${secret.NAME} references are filled in, or that holds a reference in
// its host.
func CheckURL(s string) error {
	if err := CheckShape(s); err != nil {
		return err
	}
	if from, to := HostRange(s); strings.Contains(s[from:to], "${secret.") {
		return fmt.Errorf("webhook %q: %w", DisplayURL(s), ErrSecretInHost)
	}
	return nil
}

// Lookup returns the value of the secret name.
type Lookup func(name string) (string, error)

// ResolveAll is a Target for a URL whose every ${secret.NAME} was
// written by whoever may set it (a model's webhooks, set by an operator):
// each resolves through lookup. A URL that CheckURL refuses, or a secret
// that cannot be found (or a nil lookup, where no secrets are known), is
// a target that fails without a request, saying why.
func ResolveAll(written string, lookup Lookup) Target {
	t := Target{Written: written}
	if err := CheckURL(written); err != nil {
		t.Err = fmt.Errorf("refused without sending anything: %w", err)
		return t
	}
	var firstErr error
	t.URL = secretRe.ReplaceAllStringFunc(written, func(m string) string {
		if strings.HasPrefix(m, "$$") {
			return m[1:] // $${secret.X} is the text ${secret.X}
		}
		name := secretRe.FindStringSubmatch(m)[1]
		if lookup == nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("secret %s: no secrets are known here", name)
			}
			return ""
		}
		v, err := lookup(name)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			return ""
		}
		if v != "" {
			t.Secrets = append(t.Secrets, v)
		}
		return v
	})
	if firstErr != nil {
		t.URL, t.Err = "", firstErr
	}
	return t
}

// SecretEnvPrefix names the variables secrets are read from, as on a
// worker: ${secret.NAME} is RETRAIN_SECRET_NAME.
const SecretEnvPrefix = "RETRAIN_SECRET_"

// LocalSecrets looks secrets up as a worker does, in this process:
// RETRAIN_SECRET_NAME, else the file NAME in dir (a trailing newline
// dropped) when dir is set. flag names where dir comes from, for the
// message when a secret is missing.
func LocalSecrets(dir, flag string) Lookup {
	return func(name string) (string, error) {
		if v, ok := os.LookupEnv(SecretEnvPrefix + name); ok {
			return v, nil
		}
		if dir != "" {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err == nil {
				return strings.TrimRight(string(b), "\r\n"), nil
			}
			if !os.IsNotExist(err) {
				return "", fmt.Errorf("secret %s: cannot read it from %s: %v", name, dir, err)
			}
			return "", fmt.Errorf("secret %s is not set here: no %s%s and no file %s in %s", name, SecretEnvPrefix, name, name, dir)
		}
		return "", fmt.Errorf("secret %s is not set here: this process has no %s%s and no %s (secrets are resolved by whoever sends)", name, SecretEnvPrefix, name, flag)
	}
}

// maskSecrets hides each secret in s in the forms a URL's secret takes in
// an HTTP client's error: as written, query- or path-escaped, and quoted.
// (nodetype's Masker covers more forms, but this package sits below
// nodetype; the callers mask outputs with it again.)
func maskSecrets(s string, secrets []string) string {
	var forms []string
	for _, v := range secrets {
		if v == "" {
			continue
		}
		q := strconv.Quote(v)
		forms = append(forms, v, url.QueryEscape(v), url.PathEscape(v), q[1:len(q)-1])
	}
	// Longest first, so no piece of a longer form is left behind.
	slices.SortFunc(forms, func(a, b string) int { return len(b) - len(a) })
	for _, f := range forms {
		s = strings.ReplaceAll(s, f, "***")
	}
	return s
}
