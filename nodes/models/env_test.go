package models

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/nodes/internal/nodetest"
	"github.com/retrain-ml/retrain/nodes/progenv"
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
