package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/internal/webhook"
)

// Notification is one round of telling webhooks about a move: by whom,
// when, and what became of each webhook. A move's notifications are kept
// next to its history entry, in aliases/ALIAS/notifications/N.json,
// appended by compare-and-swap, so the move record itself stays as it
// was claimed.
type Notification struct {
	Time       time.Time        `json:"time"`
	By         Actor            `json:"by"`
	Deliveries []webhook.Result `json:"deliveries"`
}

// Failed counts the deliveries that failed.
func (n Notification) Failed() int {
	f := 0
	for _, d := range n.Deliveries {
		if !d.OK() {
			f++
		}
	}
	return f
}

// maxNotifications bounds the rounds kept per move (re-sends after a
// failure); the oldest go first.
const maxNotifications = 20

func notificationsDir(name, alias string) string {
	return modelDir(name) + "aliases/" + alias + "/notifications/"
}

func notificationsKey(name, alias string, seq int64) string {
	return fmt.Sprintf("%s%020d.json", notificationsDir(name, alias), seq)
}

// RecordNotification appends n to the notifications of move seq of
// alias, which must exist.
func (r *Registry) RecordNotification(ctx context.Context, name, alias string, seq int64, n Notification) error {
	if err := validateAlias(name, alias); err != nil {
		return err
	}
	if _, err := r.readMove(ctx, name, alias, seq); err != nil {
		return err
	}
	key := notificationsKey(name, alias, seq)
	for attempt := range maxMoveAttempts {
		var list []Notification
		b, info, err := r.store.GetBytes(ctx, key)
		switch {
		case errors.Is(err, s3store.ErrNotFound):
		case err != nil:
			return fmt.Errorf("models: read notifications of move #%d of %s of %s: %w", seq, alias, name, err)
		default:
			if err := json.Unmarshal(b, &list); err != nil {
				return fmt.Errorf("models: decode notifications of move #%d of %s of %s: %w", seq, alias, name, err)
			}
		}
		list = append(list, n)
		if len(list) > maxNotifications {
			list = list[len(list)-maxNotifications:]
		}
		body, err := json.MarshalIndent(list, "", "  ")
		if err != nil {
			return err
		}
		if info.ETag == "" {
			_, err = r.store.PutIfAbsent(ctx, key, strings.NewReader(string(body)))
		} else {
			_, err = r.store.PutIfMatch(ctx, key, info.ETag, strings.NewReader(string(body)))
		}
		if errors.Is(err, s3store.ErrPreconditionFailed) {
			if err := backoff(ctx, attempt); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("models: record notifications of move #%d of %s of %s: %w", seq, alias, name, err)
		}
		return nil
	}
	return fmt.Errorf("models: record notifications of move #%d of %s of %s: still contended after %d attempts", seq, alias, name, maxMoveAttempts)
}

// notifications returns the notifications of alias's moves by sequence
// number: one listing, then a read per move that has any.
func (r *Registry) notifications(ctx context.Context, name, alias string) (map[int64][]Notification, error) {
	dir := notificationsDir(name, alias)
	out := map[int64][]Notification{}
	for o, err := range r.store.List(ctx, dir) {
		if err != nil {
			return nil, fmt.Errorf("models: notifications of %s of %s: %w", alias, name, err)
		}
		n, ok := strings.CutSuffix(strings.TrimPrefix(o.Key, dir), ".json")
		if !ok {
			continue
		}
		seq, err := strconv.ParseInt(n, 10, 64)
		if err != nil {
			continue
		}
		b, _, err := r.store.GetBytes(ctx, o.Key)
		if errors.Is(err, s3store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("models: read notifications of move #%d of %s of %s: %w", seq, alias, name, err)
		}
		var list []Notification
		if err := json.Unmarshal(b, &list); err != nil {
			return nil, fmt.Errorf("models: decode notifications of move #%d of %s of %s: %w", seq, alias, name, err)
		}
		out[seq] = list
	}
	return out, nil
}

// Latest returns the move that set alias where it is now.
func (r *Registry) Latest(ctx context.Context, name, alias string) (Move, error) {
	if err := validateAlias(name, alias); err != nil {
		return Move{}, err
	}
	cur, err := r.settle(ctx, name, alias)
	if err != nil {
		return Move{}, err
	}
	if cur.etag == "" {
		return Move{}, fmt.Errorf("%w: alias %s of %s is not set", ErrNotFound, alias, name)
	}
	return r.readMove(ctx, name, alias, cur.Seq)
}
