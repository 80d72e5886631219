package models

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
)

// TestDeployDirConfined: with --allow-paths, a local dir elsewhere fails
// the deploy as bad input naming the path and the flag; one inside works.
func TestDeployDirConfined(t *testing.T) {
	m, _, _ := newModels(t)
	inside := candidate(t, "w")
	m.Env = progenv.Policy{AllowPaths: []string{inside}}
	_, err := runDeploy(t.Context(), m, deployInput("run-1", "deploy", map[string]any{"model": "ctr", "dir": "/etc"}))
	if nodetest.ErrType(err) != errtype.BadInput || !strings.Contains(err.Error(), `"/etc"`) || !strings.Contains(err.Error(), "--allow-paths") {
		t.Errorf("dir outside: %v", err)
	}
	if _, err := runDeploy(t.Context(), m, deployInput("run-1", "deploy", map[string]any{"model": "ctr", "dir": inside})); err != nil {
		t.Errorf("dir inside: %v", err)
	}
}

// TestWebhookSecret: ${secret.NAME} in a webhook URL is resolved for the
// request only; the outputs show the reference.
func TestWebhookSecret(t *testing.T) {
	const value = "hook-s3cr3t-55"
	t.Setenv("RETRAIN_SECRET_HOOK", value)
	var got atomic.Value
	hooks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got.Store(r.URL.Path) }))
	defer hooks.Close()
	m, _, _ := newModels(t)
	out, err := runDeploy(t.Context(), m, deployInput("run-1", "deploy", map[string]any{
		"model": "ctr", "dir": candidate(t, "w"),
		"webhooks": []any{hooks.URL + "/reload/${secret.HOOK}", hooks.URL + "/x/${secret.HOOK_MISSING}"},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := got.Load().(string); p != "/reload/"+value {
		t.Errorf("webhook got %q", p)
	}
	b, _ := json.Marshal(out)
	if strings.Contains(string(b), value) || out.WebhooksOK != 1 || !strings.Contains(out.Webhooks[1].Error, "HOOK_MISSING") {
		t.Errorf("outputs %s", b)
	}
	if err := checkWebhook("https://hooks.example/${secret.HOOK}?k=${secret.K}"); err != nil {
		t.Errorf("a webhook with secret references fails the check: %v", err)
	}
}

// TestWebhookSecretOnlyWhereWritten: a ${secret.NAME} that reaches a
// webhook inside a value (a param: the workflow records no span for it) is
// sent as the text it is, never resolved; one the spec writes in the host
// is refused before anything is sent.
func TestWebhookSecretOnlyWhereWritten(t *testing.T) {
	const value = "hook-s3cr3t-77"
	t.Setenv("RETRAIN_SECRET_HOOK", value)
	var paths []string
	var mu sync.Mutex
	hooks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.RawPath+r.URL.Path+"?"+r.URL.RawQuery)
		mu.Unlock()
	}))
	defer hooks.Close()
	m, _, _ := newModels(t)
	// As a run resolves `webhooks: ["${params.notify}"]` with
	// notify=URL/n?x=${secret.HOOK}: the value holds the text, no span.
	in := deployInput("run-1", "deploy", map[string]any{
		"model": "ctr", "dir": candidate(t, "w"),
		"webhooks": []any{hooks.URL + "/n?x=${secret.HOOK}"},
	})
	in.Secrets = []dags.SecretRef{}
	out, err := runDeploy(t.Context(), m, in)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := strings.Join(paths, " ")
	mu.Unlock()
	if strings.Contains(got, value) || !strings.Contains(got, "secret.HOOK") || out.WebhooksOK != 1 {
		t.Errorf("webhook got %q (ok %d): want the reference's text, not its value", got, out.WebhooksOK)
	}

	// A secret in the host: refused at validation, and at run time.
	host := "http://${secret.HOOK}:9/x"
	if err := checkDeploy(map[string]any{"model": "ctr", "dir": "/m", "webhooks": []any{host}}); err == nil || !strings.Contains(err.Error(), "host") {
		t.Errorf("validation of a secret in the host: %v", err)
	}
	out, err = runDeploy(t.Context(), m, deployInput("run-2", "deploy", map[string]any{
		"model": "ctr", "dir": candidate(t, "w2"), "webhooks": []any{host},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if out.WebhooksOK != 0 || !strings.Contains(out.Webhooks[0].Error, "host") || strings.Contains(out.Webhooks[0].Error, value) {
		t.Errorf("a secret in the host was not refused: %+v", out.Webhooks)
	}
}

// TestWebhookSecretRedirected: a webhook carrying a spec's secret whose
// host or path a param supplied (the run's record says where the spec's
// own text ends) is refused before anything is sent; validation refuses
// the spec's text too. A param in the query is fine.
func TestWebhookSecretRedirected(t *testing.T) {
	const value = "hook-s3cr3t-91"
	t.Setenv("RETRAIN_SECRET_HOOK", value)
	var hits atomic.Int32
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer evil.Close()
	m, _, _ := newModels(t)
	// As a run resolves "${params.hook}/deployed?token=${secret.HOOK}"
	// with hook=the evil server: the spec's text begins at the param's end.
	hook := evil.URL + "/deployed?token=${secret.HOOK}"
	in := deployInput("run-1", "deploy", map[string]any{"model": "ctr", "dir": candidate(t, "w"), "webhooks": []any{hook}})
	zero := 0
	in.Secrets = []dags.SecretRef{{Path: "/webhooks/0", Spans: []dags.SecretSpan{{Name: "HOOK", Start: strings.Index(hook, "${secret.HOOK}")}}, Literal: &zero}}
	out, err := runDeploy(t.Context(), m, in)
	if err != nil {
		t.Fatal(err)
	}
	if hits.Load() != 0 || out.WebhooksOK != 0 || !strings.Contains(out.Webhooks[0].Error, "a param or an output supplied part of its scheme, host or path") {
		t.Errorf("sent %d, outputs %+v", hits.Load(), out.Webhooks)
	}
	// The spec's own URL with a param in its query: sent.
	hook = evil.URL + "/deployed?token=${secret.HOOK}&run=run-2"
	literal := strings.Index(hook, "run-2")
	in = deployInput("run-2", "deploy", map[string]any{"model": "ctr", "dir": candidate(t, "w2"), "webhooks": []any{hook}})
	in.Secrets = []dags.SecretRef{{Path: "/webhooks/0", Spans: []dags.SecretSpan{{Name: "HOOK", Start: strings.Index(hook, "${secret.HOOK}")}}, Literal: &literal}}
	if out, err = runDeploy(t.Context(), m, in); err != nil || out.WebhooksOK != 1 || hits.Load() != 1 {
		t.Errorf("a param in the query: sent %d, %+v, %v", hits.Load(), out.Webhooks, err)
	}
	err = checkDeploy(map[string]any{"model": "ctr", "dir": "/m", "webhooks": []any{"${params.hook}/deployed?token=${secret.HOOK}"}})
	if err == nil || !strings.Contains(err.Error(), "${params.hook} supplies part of them") {
		t.Errorf("validation: %v", err)
	}
}
