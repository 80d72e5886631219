// Package serving tells a serving system about alias moves: every move of
// a model's alias, whoever makes it (a deploy, a canary, a compensation,
// `retrain model promote` or `rollback`), is POSTed to the model's
// webhooks (models.Registry.Webhooks) with deploy's payload, retries and
// masking, and what became of each webhook is recorded in the alias
// history next to the move (models.Registry.RecordNotification).
//
// It sits below the CLI and the node types alike, so both send the same
// event the same way.
package serving

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/internal/webhook"
)

// Event is the JSON body POSTed for an alias move: a deploy's webhook
// payload, with who moved it and why.
type Event struct {
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
	// Kind is the move's: promote or rollback.
	Kind   string `json:"kind,omitempty"`
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// EventFor is the event of move mv, made by pipeline (none from the CLI).
func EventFor(ctx context.Context, reg *models.Registry, mv models.Move, pipeline string) (Event, error) {
	v, err := reg.Get(ctx, mv.Model, mv.To)
	if err != nil {
		return Event{}, fmt.Errorf("read %s@%s for its webhook event: %w", mv.Model, mv.To, err)
	}
	return Event{
		Model: mv.Model, Alias: mv.Alias, Version: mv.To, PreviousVersion: mv.From, Checksum: v.Checksum,
		URI: reg.URI(v).String(), Seq: mv.Seq, Pipeline: pipeline, Run: mv.Actor.Run, Time: mv.Time,
		Kind: mv.Kind, By: mv.Actor.Name, Reason: mv.Reason,
	}, nil
}

// Notifier sends a model's webhooks after a move.
type Notifier struct {
	Registry *models.Registry
	Sender   webhook.Sender
	// Secrets resolves ${secret.NAME} in the model's webhooks: the
	// sender's own secrets. nil: none are known, and a webhook that names
	// one fails without a request, saying so.
	Secrets webhook.Lookup
	// By is who records the deliveries in the alias history.
	By models.Actor
}

// Outcome is what a notification of one move did.
type Outcome struct {
	// Deliveries are every webhook told of the move: those the caller
	// had sent already, then the model's.
	Deliveries []webhook.Result `json:"deliveries"`
	Failed     int              `json:"failed"`
	// Err is why the model's webhooks could not be read or its event not
	// built: serving was not told.
	Err error `json:"-"`
	// RecordErr is why the deliveries are not in the alias history.
	RecordErr error `json:"-"`
}

// OK reports whether every webhook was told (vacuously, with none).
func (o Outcome) OK() bool { return o.Err == nil && o.Failed == 0 }

// Summary is one line on what serving heard.
func (o Outcome) Summary() string {
	if o.Err != nil {
		return "serving was not told: " + o.Err.Error()
	}
	if len(o.Deliveries) == 0 {
		return "no webhooks to tell"
	}
	if o.Failed == 0 {
		return fmt.Sprintf("serving told: %d of %d webhooks delivered", len(o.Deliveries), len(o.Deliveries))
	}
	var failed []string
	for _, d := range o.Deliveries {
		if !d.OK() {
			failed = append(failed, Describe(d))
		}
	}
	return fmt.Sprintf("serving was NOT told: %d of %d webhooks failed: %s", o.Failed, len(o.Deliveries), strings.Join(failed, "; "))
}

// Describe is one delivery in words: "URL: HTTP 200 after 1 attempt".
func Describe(d webhook.Result) string {
	s := "attempts"
	if d.Attempts == 1 {
		s = "attempt"
	}
	if d.Attempts == 0 {
		return fmt.Sprintf("%s: not sent: %s", d.URL, d.Error)
	}
	if d.OK() {
		return fmt.Sprintf("%s: HTTP %d after %d %s", d.URL, d.Status, d.Attempts, s)
	}
	return fmt.Sprintf("%s: failed after %d %s: %s", d.URL, d.Attempts, s, d.Error)
}

// AfterMove tells the model's webhooks about mv, made by pipeline (""
// from the CLI), and records the deliveries in the alias history. A move
// that changed nothing is not told: nothing moved.
func (n Notifier) AfterMove(ctx context.Context, mv models.Move, pipeline string) Outcome {
	if !mv.Changed {
		return Outcome{}
	}
	ev, err := EventFor(ctx, n.Registry, mv, pipeline)
	if err != nil {
		return Outcome{Err: err}
	}
	return n.Notify(ctx, ev, nil, nil)
}

// Notify tells the model's webhooks about the move ev names, less those
// in skip (URLs as written that the caller sent ev to already, whose
// results are sent), and records sent and its own deliveries together as
// one round in the alias history of move ev.Seq.
func (n Notifier) Notify(ctx context.Context, ev Event, sent []webhook.Result, skip []string) Outcome {
	out := Outcome{Deliveries: slices.Clone(sent)}
	hooks, err := n.Registry.Webhooks(ctx, ev.Model)
	if err != nil {
		out.Err = fmt.Errorf("the webhooks of %s could not be read: %w", ev.Model, err)
	}
	var targets []webhook.Target
	for _, u := range hooks.URLs {
		if !slices.Contains(skip, u) {
			targets = append(targets, webhook.ResolveAll(u, n.Secrets))
		}
	}
	if len(targets) > 0 {
		body, err := json.Marshal(ev)
		if err != nil {
			out.Err = fmt.Errorf("encode the webhook event: %w", err)
			return out
		}
		out.Deliveries = append(out.Deliveries, n.Sender.Send(ctx, targets, max(hooks.Attempts, 1), body)...)
	}
	for _, d := range out.Deliveries {
		if !d.OK() {
			out.Failed++
		}
	}
	if len(out.Deliveries) > 0 {
		out.RecordErr = n.Registry.RecordNotification(ctx, ev.Model, ev.Alias, ev.Seq, models.Notification{
			Time: time.Now().UTC(), By: n.By, Deliveries: out.Deliveries,
		})
	}
	return out
}
