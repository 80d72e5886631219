package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/internal/webhook"
)

// A model's webhooks are told about every move of any of its aliases,
// whoever makes it: a deploy, a canary, a compensation, `retrain model
// promote` and `rollback`. They live next to the model, in
// models/NAME/webhooks.json, replaced by compare-and-swap. A URL holds
// ${secret.NAME} references as written; whoever sends resolves them from
// its own secrets, so no value is ever stored.

// Limits on a model's webhooks.
const (
	MaxWebhooks        = 16
	MaxWebhookAttempts = 10
	maxWebhookURL      = 2048
)

// Webhooks are a model's webhooks: the content of webhooks.json.
type Webhooks struct {
	Model    string    `json:"model"`
	URLs     []string  `json:"urls"`     // as written, ${secret.NAME} and all
	Attempts int       `json:"attempts"` // per URL and move
	Updated  time.Time `json:"updated"`
	By       Actor     `json:"by"`
}

// ErrWebhooksChanged: a model's webhooks changed while they were being
// set; nothing was written.
var ErrWebhooksChanged = errors.New("models: webhooks changed concurrently")

func webhooksKey(name string) string { return modelDir(name) + "webhooks.json" }

// CheckWebhooks refuses URLs a model cannot hold: not http(s), a secret
// in the host, too many or too long, or attempts out of 1 to
// MaxWebhookAttempts. Nothing is read or written.
func CheckWebhooks(urls []string, attempts int) error {
	if len(urls) > MaxWebhooks {
		return fmt.Errorf("%d webhooks: a model holds at most %d", len(urls), MaxWebhooks)
	}
	if attempts < 1 || attempts > MaxWebhookAttempts {
		return fmt.Errorf("webhook attempts must be 1 to %d, got %d", MaxWebhookAttempts, attempts)
	}
	for _, u := range urls {
		if len(u) > maxWebhookURL {
			return fmt.Errorf("webhook %q is longer than %d bytes", webhook.DisplayURL(u), maxWebhookURL)
		}
		if err := webhook.CheckURL(u); err != nil {
			return err
		}
	}
	return nil
}

// Webhooks returns model name's webhooks; none (and no error) when none
// were ever set.
func (r *Registry) Webhooks(ctx context.Context, name string) (Webhooks, error) {
	w, _, err := r.readWebhooks(ctx, name)
	return w, err
}

func (r *Registry) readWebhooks(ctx context.Context, name string) (Webhooks, string, error) {
	if err := validateName("model", name); err != nil {
		return Webhooks{}, "", err
	}
	b, info, err := r.store.GetBytes(ctx, webhooksKey(name))
	if errors.Is(err, s3store.ErrNotFound) {
		return Webhooks{Model: name}, "", nil
	}
	if err != nil {
		return Webhooks{}, "", fmt.Errorf("models: read webhooks of %s: %w", name, err)
	}
	var w Webhooks
	if err := json.Unmarshal(b, &w); err != nil {
		return Webhooks{}, "", fmt.Errorf("models: decode webhooks of %s: %w", name, err)
	}
	w.Model = name
	return w, info.ETag, nil
}

// SetWebhooks replaces model name's webhooks by urls (none clears them),
// each tried attempts times per move; duplicates are dropped. Bad URLs
// are refused before anything is written. If they change while being
// set, SetWebhooks fails with [ErrWebhooksChanged].
func (r *Registry) SetWebhooks(ctx context.Context, name string, urls []string, attempts int, by Actor) (Webhooks, error) {
	if err := validateName("model", name); err != nil {
		return Webhooks{}, err
	}
	var uniq []string
	for _, u := range urls {
		if u = strings.TrimSpace(u); !slices.Contains(uniq, u) {
			uniq = append(uniq, u)
		}
	}
	if err := CheckWebhooks(uniq, attempts); err != nil {
		return Webhooks{}, fmt.Errorf("%w: %v", ErrInvalidWebhook, err)
	}
	_, etag, err := r.readWebhooks(ctx, name)
	if err != nil {
		return Webhooks{}, err
	}
	w := Webhooks{Model: name, URLs: uniq, Attempts: attempts, Updated: r.now().UTC(), By: by}
	if w.URLs == nil {
		w.URLs = []string{}
	}
	body, err := json.MarshalIndent(w, "", "  ")
	if err != nil {
		return Webhooks{}, err
	}
	if etag == "" {
		_, err = r.store.PutIfAbsent(ctx, webhooksKey(name), strings.NewReader(string(body)))
	} else {
		_, err = r.store.PutIfMatch(ctx, webhooksKey(name), etag, strings.NewReader(string(body)))
	}
	if errors.Is(err, s3store.ErrPreconditionFailed) {
		return Webhooks{}, fmt.Errorf("%w: webhooks of %s: read them and set them again", ErrWebhooksChanged, name)
	}
	if err != nil {
		return Webhooks{}, fmt.Errorf("models: write webhooks of %s: %w", name, err)
	}
	r.log.InfoContext(ctx, "models: webhooks set", "model", name, "count", len(w.URLs), "by", by.Name)
	return w, nil
}

// ErrInvalidWebhook: a webhook URL or attempts a model cannot hold.
// Nothing was written.
var ErrInvalidWebhook = errors.New("models: invalid webhook")
