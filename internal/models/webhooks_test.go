package models_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/internal/webhook"
)

// TestModelWebhooks: a model's webhooks are set, read back, replaced and
// cleared; bad ones are refused before anything is written; concurrent
// setters each either win or are told the webhooks changed, and what
// remains is one winner's list.
func TestModelWebhooks(t *testing.T) {
	ctx := context.Background()
	reg, _ := newRegistry(t)
	if w, err := reg.Webhooks(ctx, "ctr"); err != nil || len(w.URLs) != 0 {
		t.Fatalf("unset webhooks = %+v, %v", w, err)
	}
	urls := []string{"http://serving:8080/reload", "https://hooks.example/${secret.HOOK}", "http://serving:8080/reload"}
	w, err := reg.SetWebhooks(ctx, "ctr", urls, 5, bot)
	if err != nil || !slices.Equal(w.URLs, urls[:2]) || w.Attempts != 5 {
		t.Fatalf("set = %+v, %v", w, err)
	}
	if got, err := reg.Webhooks(ctx, "ctr"); err != nil || !slices.Equal(got.URLs, urls[:2]) || got.Attempts != 5 || got.By != bot {
		t.Fatalf("read back %+v, %v", got, err)
	}
	for _, bad := range [][]string{{"http://${secret.HOST}/x"}, {"ftp://x/y"}, {"not a url"}} {
		if _, err := reg.SetWebhooks(ctx, "ctr", bad, 3, bot); !errors.Is(err, models.ErrInvalidWebhook) {
			t.Errorf("SetWebhooks(%q) = %v, want ErrInvalidWebhook", bad, err)
		}
	}
	if _, err := reg.SetWebhooks(ctx, "ctr", urls[:1], 0, bot); !errors.Is(err, models.ErrInvalidWebhook) {
		t.Errorf("0 attempts: %v", err)
	}
	if _, err := reg.SetWebhooks(ctx, "../x", urls[:1], 3, bot); !errors.Is(err, models.ErrInvalidName) {
		t.Errorf("bad model name: %v", err)
	}
	if got, _ := reg.Webhooks(ctx, "ctr"); !slices.Equal(got.URLs, urls[:2]) {
		t.Fatalf("a refused set changed the webhooks to %v", got.URLs)
	}

	var wg sync.WaitGroup
	results := make([]error, 8)
	for i := range results {
		wg.Go(func() {
			_, results[i] = reg.SetWebhooks(ctx, "ctr", []string{fmt.Sprintf("http://h%d.example/", i)}, 3, bot)
		})
	}
	wg.Wait()
	var winners []string
	for i, err := range results {
		switch {
		case err == nil:
			winners = append(winners, fmt.Sprintf("http://h%d.example/", i))
		case !errors.Is(err, models.ErrWebhooksChanged):
			t.Fatalf("setter %d: %v", i, err)
		}
	}
	got, err := reg.Webhooks(ctx, "ctr")
	if err != nil || len(winners) == 0 || len(got.URLs) != 1 || !slices.Contains(winners, got.URLs[0]) {
		t.Fatalf("after a race: %+v, %v; winners %v", got, err, winners)
	}

	if w, err := reg.SetWebhooks(ctx, "ctr", nil, 3, bot); err != nil || len(w.URLs) != 0 {
		t.Fatalf("clear: %+v, %v", w, err)
	}
	if got, _ := reg.Webhooks(ctx, "ctr"); len(got.URLs) != 0 {
		t.Fatalf("cleared webhooks read back as %v", got.URLs)
	}
}

// TestHistoryNotifications: rounds of deliveries recorded for a move
// appear with it in the history, in order, and a move that does not
// exist gets none.
func TestHistoryNotifications(t *testing.T) {
	ctx := context.Background()
	reg, _ := newRegistry(t)
	for _, v := range []string{"v1", "v2"} {
		if _, err := reg.Register(ctx, "fraud", artifacts(t, map[string]string{"m.bin": v}), v, models.Meta{}); err != nil {
			t.Fatal(err)
		}
	}
	m1, err := reg.Promote(ctx, "fraud", "production", "v1", bot, "")
	if err != nil {
		t.Fatal(err)
	}
	m2, err := reg.Promote(ctx, "fraud", "production", "v2", bot, "")
	if err != nil {
		t.Fatal(err)
	}
	failed := models.Notification{By: bot, Deliveries: []webhook.Result{{URL: "http://s/hook", Attempts: 3, Error: "HTTP 503"}}}
	ok := models.Notification{By: bot, Deliveries: []webhook.Result{{URL: "http://s/hook", Status: 200, Attempts: 1}}}
	for _, n := range []models.Notification{failed, ok} {
		if err := reg.RecordNotification(ctx, "fraud", "production", m2.Seq, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := reg.RecordNotification(ctx, "fraud", "production", 9, ok); !errors.Is(err, models.ErrNotFound) {
		t.Errorf("recording for move #9: %v", err)
	}
	h, err := reg.History(ctx, "fraud", "production")
	if err != nil || len(h) != 2 {
		t.Fatalf("history %+v, %v", h, err)
	}
	if h[0].Seq != m1.Seq || len(h[0].Notifications) != 0 {
		t.Errorf("move #1 has notifications %+v", h[0].Notifications)
	}
	n := h[1].Notifications
	if len(n) != 2 || n[0].Failed() != 1 || n[1].Failed() != 0 || n[1].Deliveries[0].Status != 200 || n[0].Deliveries[0].Error != "HTTP 503" {
		t.Fatalf("move #2 notifications %+v", n)
	}
	if latest, err := reg.Latest(ctx, "fraud", "production"); err != nil || latest.Seq != m2.Seq || latest.To != "v2" {
		t.Fatalf("latest %+v, %v", latest, err)
	}
}
