package models

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/internal/serving"
	"github.com/retrain-ml/retrain/internal/webhook"
	"github.com/retrain-ml/retrain/nodetype"
)

// webhookEvent is the JSON body POSTed to a deploy's webhooks: the one
// every alias move sends (package serving).
type webhookEvent = serving.Event

// WebhookResult is what a deploy reports about one webhook.
type WebhookResult = webhook.Result

// sender sends webhooks with the node types' client and backoff.
func (m *Models) sender(log *slog.Logger) webhook.Sender {
	return webhook.Sender{HTTP: m.HTTP, Backoff: m.webhookBackoff, Log: log}
}

// notify POSTs ev to every webhook at once and reports each outcome. A
// serving system reloads on the call; at-least-once delivery is fine, since
// the event names the version and a reload of the same version is a no-op.
func (m *Models) notify(ctx context.Context, w DeployWith, ev webhookEvent, log *slog.Logger) []WebhookResult {
	body, _ := json.Marshal(ev)
	return m.send(ctx, "webhooks", w.Webhooks, w.WebhookAttempts, body, log)
}

// send resolves the spec's ${secret.NAME} references in hooks (the list
// at path in the node's `with`) on this worker and POSTs body to them.
// The results show the URLs as written, ${secret.NAME} and all; only the
// requests get the values, and errors have them masked.
func (m *Models) send(ctx context.Context, path string, hooks []string, attempts int, body []byte, log *slog.Logger) []WebhookResult {
	targets := make([]webhook.Target, len(hooks))
	for i, hook := range hooks {
		targets[i] = m.target(ctx, dags.PointerTo(path, strconv.Itoa(i)), hook)
	}
	return m.sender(log).Send(ctx, targets, attempts, body)
}

func (m *Models) target(ctx context.Context, path, hook string) webhook.Target {
	t := webhook.Target{Written: hook}
	if err := secretInHost(ctx, path, hook); err != nil {
		t.Err = err
		return t
	}
	if err := secretRedirected(ctx, path, hook); err != nil {
		t.Err = err
		return t
	}
	t.URL, t.Secrets, t.Err = m.Env.ResolveString(ctx, path, hook)
	return t
}

// secretRedirected refuses a hook that carries a secret when a value (a
// param, an output) supplied part of its scheme, host or path: checked at
// validation for the spec's text, and here again for what the run
// resolved, whose spec may have been registered before the check.
func secretRedirected(ctx context.Context, path, hook string) error {
	spans := nodetype.SecretSpans(ctx, path)
	literal, ok := nodetype.SecretLiteral(ctx, path)
	if len(spans) == 0 || !ok {
		return nil
	}
	end := len(hook)
	if i := strings.IndexAny(hook, "?#"); i >= 0 {
		end = i
	}
	if end > literal {
		return nodetype.Permanent(errtype.BadInput, "webhook %s: it carries secret %s, but a param or an output supplied part of its scheme, host or path; refused without sending anything", displayURL(hook), spans[0].Name)
	}
	return nil
}

// Notifier tells the model's own webhooks (set with `retrain model
// webhooks`) about the moves the node of in makes: their ${secret.NAME}
// resolve from this worker's secrets, noted so that the node's outputs
// and errors mask them.
func (m *Models) Notifier(ctx context.Context, in nodetype.Input) (serving.Notifier, error) {
	reg, err := m.registry()
	if err != nil {
		return serving.Notifier{}, err
	}
	return serving.Notifier{
		Registry: reg,
		Sender:   m.sender(m.Logger.With("pipeline", in.Pipeline, "run", in.RunID, "node", in.Node)),
		Secrets: func(name string) (string, error) {
			v, err := m.Env.Secret(name)
			if err == nil && v != "" {
				nodetype.NoteSecrets(ctx, v)
			}
			return v, err
		},
		By: actor(in),
	}, nil
}

// NotifyMove tells the model's webhooks about mv, a move the node of in
// made, and records their deliveries, and sent (what the node's own
// webhooks answered about the same move), in the alias history; it
// returns them all, sent first. Best effort, as a deploy's webhooks are:
// the move stands whatever they answer. A move that changed nothing is
// told to no one.
func (m *Models) NotifyMove(ctx context.Context, in nodetype.Input, mv models.Move, sent []WebhookResult) []WebhookResult {
	n, err := m.Notifier(ctx, in)
	if err != nil || !mv.Changed {
		return sent
	}
	ev, err := serving.EventFor(ctx, n.Registry, mv, in.Pipeline)
	if err != nil {
		m.logOutcome(in, mv, serving.Outcome{Err: err})
		return sent
	}
	o := n.Notify(ctx, ev, sent, nil)
	m.logOutcome(in, mv, o)
	return o.Deliveries
}

// notifyModel is notifyMove for a move whose event the node sent to its
// own webhooks already (sent, to the URLs hooks).
func (m *Models) notifyModel(ctx context.Context, in nodetype.Input, mv models.Move, ev webhookEvent, sent []WebhookResult, hooks []string) []WebhookResult {
	n, err := m.Notifier(ctx, in)
	if err != nil {
		return sent
	}
	o := n.Notify(ctx, ev, sent, hooks)
	m.logOutcome(in, mv, o)
	return o.Deliveries
}

func (m *Models) logOutcome(in nodetype.Input, mv models.Move, o serving.Outcome) {
	log := m.Logger.With("pipeline", in.Pipeline, "run", in.RunID, "node", in.Node, "model", mv.Model, "alias", mv.Alias, "seq", mv.Seq)
	if o.Err != nil {
		log.Warn("the model's webhooks were not told of the move; it stands", "error", o.Err)
	}
	if o.RecordErr != nil {
		log.Warn("webhook deliveries not recorded in the alias history", "error", o.RecordErr)
	}
}

func checkWebhook(s string) error { return webhook.CheckShape(s) }

// hostRange returns the offsets of the host (and port) of the URL s.
func hostRange(s string) (from, to int) { return webhook.HostRange(s) }

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
func displayURL(s string) string { return webhook.DisplayURL(s) }

// PostJSON POSTs body as JSON to every hook at once, as a deploy's
// webhooks are sent (attempts each, retried with backoff, ${secret.NAME}
// resolved on the worker and masked in errors), and reports each outcome.
// path names the hooks' list in the node's `with` block ("webhooks").
func (m *Models) PostJSON(ctx context.Context, path string, hooks []string, attempts int, body any, log *slog.Logger) []WebhookResult {
	b, err := json.Marshal(body)
	if err != nil {
		results := make([]WebhookResult, len(hooks))
		for i, h := range hooks {
			results[i] = WebhookResult{URL: displayURL(h), Error: "encode body: " + err.Error()}
		}
		return results
	}
	return m.send(ctx, path, hooks, attempts, b, log)
}

// CheckWebhook refuses, before any run, a webhook that is not an http(s)
// URL, holds a secret in its host, or carries a secret to a scheme, host
// or path a param or an output supplies.
func CheckWebhook(s string) error {
	if !dags.HasRef(s) {
		if err := checkWebhook(s); err != nil {
			return err
		}
	}
	if from, to := hostRange(s); strings.Contains(s[from:to], "${secret.") {
		return fmt.Errorf("webhook %q: a secret may not be in the host; put it in the path, query or user information", displayURL(s))
	}
	if err := dags.CheckSecretURL(s); err != nil {
		return fmt.Errorf("webhook %w", err)
	}
	return nil
}
