package models

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/nodetype"
)

// TestModelWebhooksHearNodeMoves: the model's webhooks hear a deploy's
// move (a URL the node lists too is told once) and a rollback_model's,
// with deploy's payload; the outputs count them and the alias history
// records every delivery, a failed one included.
func TestModelWebhooksHearNodeMoves(t *testing.T) {
	t.Parallel()
	m, reg, _ := newModels(t)
	ctx := t.Context()
	var mu sync.Mutex
	heard := map[string][]webhookEvent{}
	mux := http.NewServeMux()
	for _, path := range []string{"/node", "/both", "/model"} {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			var ev webhookEvent
			b, _ := io.ReadAll(r.Body)
			_ = json.Unmarshal(b, &ev)
			mu.Lock()
			heard[path] = append(heard[path], ev)
			mu.Unlock()
		})
	}
	mux.HandleFunc("/down", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "down", http.StatusBadGateway) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	if _, err := reg.SetWebhooks(ctx, "ctr", []string{srv.URL + "/both", srv.URL + "/model", srv.URL + "/down"}, 2, models.Actor{Name: "ops"}); err != nil {
		t.Fatal(err)
	}
	for i, w := range []string{"w1", "w2"} {
		out, err := runDeploy(ctx, m, deployInput("run-"+w, "deploy", map[string]any{
			"model": "ctr", "dir": candidate(t, w), "webhooks": []any{srv.URL + "/node", srv.URL + "/both"}, "webhook_attempts": 1,
		}))
		if err != nil {
			t.Fatal(err)
		}
		// /node and /both from the node, /model and /down from the model.
		if len(out.Webhooks) != 4 || out.WebhooksOK != 3 || out.WebhooksFailed != 1 || out.Webhooks[3].Attempts != 2 {
			t.Fatalf("deploy %d webhooks %+v", i+1, out.Webhooks)
		}
	}
	rb, err := runRollback(ctx, m, nodetype.Input{Pipeline: "train", RunID: "run-rb", Node: "undo", Type: "rollback_model",
		With: map[string]any{"model": "ctr", "from": "v2", "to": "v1"}})
	if err != nil || !rb.Changed || len(rb.Webhooks) != 3 || rb.WebhooksFailed != 1 {
		t.Fatalf("rollback %+v, %v", rb, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(heard["/node"]) != 2 || len(heard["/both"]) != 3 || len(heard["/model"]) != 3 {
		t.Fatalf("heard %d/%d/%d events, want 2 node, 3 both, 3 model", len(heard["/node"]), len(heard["/both"]), len(heard["/model"]))
	}
	last := heard["/model"][2]
	if last.Version != "v1" || last.PreviousVersion != "v2" || last.Kind != "rollback" || last.Seq != 3 || last.Run != "run-rb" || last.Pipeline != "train" {
		t.Errorf("the rollback's event %+v", last)
	}
	h, err := reg.History(ctx, "ctr", "production")
	if err != nil || len(h) != 3 {
		t.Fatalf("history %+v, %v", h, err)
	}
	for i, want := range []int{4, 4, 3} {
		if n := h[i].Notifications; len(n) != 1 || len(n[0].Deliveries) != want || n[0].Failed() != 1 || n[0].By.Run == "" {
			t.Errorf("move #%d notifications %+v, want %d deliveries, 1 failed", i+1, n, want)
		}
	}
}
