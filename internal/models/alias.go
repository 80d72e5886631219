package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/retrain-ml/retrain/internal/s3store"
)

// Actor says who moved an alias.
type Actor struct {
	Name string `json:"name"`          // a person, or a service such as "retrain-worker"
	Run  string `json:"run,omitempty"` // the pipeline or workflow run, if any
}

// Move is one entry of an alias's history.
type Move struct {
	Seq    int64     `json:"seq"` // 1 for the alias's first move
	Model  string    `json:"model"`
	Alias  string    `json:"alias"`
	From   string    `json:"from,omitempty"` // empty for the first move
	To     string    `json:"to"`
	Kind   string    `json:"kind"` // KindPromote or KindRollback
	Actor  Actor     `json:"actor"`
	Reason string    `json:"reason,omitempty"`
	Time   time.Time `json:"time"`
	// Forced is set on a move to a version trained for an older logical
	// date than the one the alias named, made by force (a spec's literal
	// `force: true`, the CLI's --force); Actor and Reason say who and why.
	Forced bool `json:"forced,omitempty"`
	// Changed is false when the move found the alias already at the
	// version; the Move is then the one that had put it there.
	Changed bool `json:"-"`
	// Notifications are the rounds of webhooks told about the move,
	// oldest first (History fills them in; they are stored apart, see
	// RecordNotification).
	Notifications []Notification `json:"notifications,omitempty"`
}

// Alias is where an alias points: the content of aliases/ALIAS.json.
type Alias struct {
	Model   string    `json:"model"`
	Alias   string    `json:"alias"`
	Version string    `json:"version"`
	Seq     int64     `json:"seq"`     // the history entry that set it
	Updated time.Time `json:"updated"` // that entry's time
}

// aliasState is an alias as read, with the ETag to replace it by.
type aliasState struct {
	Alias
	etag string // empty: the alias does not exist yet
}

const (
	// maxMoveAttempts bounds how often a move retries after losing the
	// race for a sequence number to a concurrent move.
	maxMoveAttempts = 64
	// maxSettleRounds bounds the pending moves a read applies; there is at
	// most one at a time, more rounds only absorb races.
	maxSettleRounds = 16
)

// move records and applies one move of an alias, to the version decide
// picks for req from the alias's current state.
func (r *Registry) move(ctx context.Context, req MoveRequest, retry bool) (Move, error) {
	name, alias, kind, by, reason := req.Model, req.Alias, req.Kind, req.By, req.Reason
	log := r.log.With("model", name, "alias", alias)
	for attempt := range maxMoveAttempts {
		cur, err := r.settle(ctx, name, alias)
		if err != nil {
			return Move{}, err
		}
		to, forced, err := r.decide(ctx, req, cur)
		if err != nil {
			return Move{}, err
		}
		if cur.etag != "" && to == cur.Version {
			last, err := r.readMove(ctx, name, alias, cur.Seq)
			if err != nil {
				return Move{}, err
			}
			log.InfoContext(ctx, "models: alias already at version", "version", to)
			return last, nil
		}
		m := Move{
			Seq: cur.Seq + 1, Model: name, Alias: alias, From: cur.Version, To: to,
			Kind: kind, Actor: by, Reason: reason, Time: r.now().UTC(), Forced: forced,
		}
		body, err := json.MarshalIndent(m, "", "  ")
		if err != nil {
			return Move{}, fmt.Errorf("models: encode move: %w", err)
		}
		// Claiming the sequence number is the decision: from here on the
		// move happens, whoever applies it.
		_, err = r.store.PutIfAbsent(ctx, historyKey(name, alias, m.Seq), strings.NewReader(string(body)))
		if errors.Is(err, s3store.ErrExists) {
			if !retry {
				return Move{}, fmt.Errorf("%w: %s of %s", ErrConcurrentMove, alias, name)
			}
			if err := backoff(ctx, attempt); err != nil {
				return Move{}, err
			}
			continue
		}
		if err != nil {
			return Move{}, fmt.Errorf("models: record move of %s of %s: %w", alias, name, err)
		}
		if err := r.apply(ctx, cur, m); err != nil {
			// Lost to a helper that applied our move, or failed: a
			// settle makes sure the alias reflects the move either way.
			if _, serr := r.settle(ctx, name, alias); serr != nil {
				return m, fmt.Errorf("models: move #%d of %s of %s is recorded but not applied yet; the next read or move of the alias applies it: %w",
					m.Seq, alias, name, serr)
			}
		}
		m.Changed = true
		log.InfoContext(ctx, "models: alias moved", "seq", m.Seq, "from", m.From, "to", m.To, "kind", kind,
			"actor", by.Name, "run", by.Run, "reason", reason, "forced", forced)
		return m, nil
	}
	return Move{}, fmt.Errorf("models: move %s of %s: still contended after %d attempts", alias, name, maxMoveAttempts)
}

func backoff(ctx context.Context, attempt int) error {
	d := time.Duration(1+rand.IntN(5*min(attempt+1, 20))) * time.Millisecond
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// settle reads the alias and applies the move recorded after the one it
// reflects, if any: a mover may have crashed between recording a move and
// applying it.
func (r *Registry) settle(ctx context.Context, name, alias string) (aliasState, error) {
	for range maxSettleRounds {
		cur, err := r.readAlias(ctx, name, alias)
		if err != nil {
			return aliasState{}, err
		}
		next, err := r.readMove(ctx, name, alias, cur.Seq+1)
		if errors.Is(err, ErrNotFound) {
			return cur, nil
		}
		if err != nil {
			return aliasState{}, err
		}
		if err := r.apply(ctx, cur, next); err != nil && !errors.Is(err, s3store.ErrPreconditionFailed) {
			return aliasState{}, err
		}
	}
	return aliasState{}, fmt.Errorf("models: alias %s of %s keeps moving", alias, name)
}

// apply replaces the alias in state cur by the result of move m, by
// compare-and-swap; it fails with s3store.ErrPreconditionFailed if the
// alias is no longer in state cur.
func (r *Registry) apply(ctx context.Context, cur aliasState, m Move) error {
	if m.Seq != cur.Seq+1 || m.From != cur.Version {
		return fmt.Errorf("models: history of %s of %s is inconsistent: move #%d goes from %q, alias is at %q (#%d)",
			m.Alias, m.Model, m.Seq, m.From, cur.Version, cur.Seq)
	}
	body, err := json.MarshalIndent(Alias{Model: m.Model, Alias: m.Alias, Version: m.To, Seq: m.Seq, Updated: m.Time}, "", "  ")
	if err != nil {
		return err
	}
	key := aliasKey(m.Model, m.Alias)
	if cur.etag == "" {
		_, err = r.store.PutIfAbsent(ctx, key, strings.NewReader(string(body)))
	} else {
		_, err = r.store.PutIfMatch(ctx, key, cur.etag, strings.NewReader(string(body)))
	}
	return err
}

func (r *Registry) readAlias(ctx context.Context, name, alias string) (aliasState, error) {
	b, info, err := r.store.GetBytes(ctx, aliasKey(name, alias))
	if errors.Is(err, s3store.ErrNotFound) {
		return aliasState{Alias: Alias{Model: name, Alias: alias}}, nil
	}
	if err != nil {
		return aliasState{}, fmt.Errorf("models: read alias %s of %s: %w", alias, name, err)
	}
	st := aliasState{etag: info.ETag}
	if err := json.Unmarshal(b, &st.Alias); err != nil {
		return aliasState{}, fmt.Errorf("models: decode alias %s of %s: %w", alias, name, err)
	}
	return st, nil
}

func (r *Registry) readMove(ctx context.Context, name, alias string, seq int64) (Move, error) {
	b, _, err := r.store.GetBytes(ctx, historyKey(name, alias, seq))
	if errors.Is(err, s3store.ErrNotFound) {
		return Move{}, fmt.Errorf("%w: move #%d of %s of %s", ErrNotFound, seq, alias, name)
	}
	if err != nil {
		return Move{}, fmt.Errorf("models: read move #%d of %s of %s: %w", seq, alias, name, err)
	}
	var m Move
	if err := json.Unmarshal(b, &m); err != nil {
		return Move{}, fmt.Errorf("models: decode move #%d of %s of %s: %w", seq, alias, name, err)
	}
	return m, nil
}

// History returns every move of alias, oldest first.
func (r *Registry) History(ctx context.Context, name, alias string) ([]Move, error) {
	if err := validateAlias(name, alias); err != nil {
		return nil, err
	}
	cur, err := r.settle(ctx, name, alias)
	if err != nil {
		return nil, err
	}
	var moves []Move
	for seq := int64(1); seq <= cur.Seq; seq++ {
		m, err := r.readMove(ctx, name, alias, seq)
		if err != nil {
			return nil, err
		}
		moves = append(moves, m)
	}
	if len(moves) == 0 {
		return moves, nil
	}
	notes, err := r.notifications(ctx, name, alias)
	if err != nil {
		return nil, err
	}
	for i := range moves {
		moves[i].Notifications = notes[moves[i].Seq]
	}
	return moves, nil
}

// AliasAt returns the move that made alias name the version it named at
// time t; its To is that version. Times are those of the moves' records,
// taken from the clock of the process that made each move. It is the last
// move made at or before t, so the history is read from its newest entry
// back only as far as that move.
func (r *Registry) AliasAt(ctx context.Context, name, alias string, t time.Time) (Move, error) {
	if err := validateAlias(name, alias); err != nil {
		return Move{}, err
	}
	cur, err := r.settle(ctx, name, alias)
	if err != nil {
		return Move{}, err
	}
	for seq := cur.Seq; seq >= 1; seq-- {
		m, err := r.readMove(ctx, name, alias, seq)
		if err != nil {
			return Move{}, err
		}
		if !m.Time.After(t) {
			return m, nil
		}
	}
	return Move{}, fmt.Errorf("%w: %s of %s was not set at %s", ErrNotFound, alias, name, t.Format(time.RFC3339Nano))
}

// Aliases returns the aliases of model name.
func (r *Registry) Aliases(ctx context.Context, name string) ([]Alias, error) {
	if err := validateName("model", name); err != nil {
		return nil, err
	}
	dir := modelDir(name) + "aliases/"
	var aliases []Alias
	for o, err := range r.store.List(ctx, dir) {
		if err != nil {
			return nil, fmt.Errorf("models: aliases of %s: %w", name, err)
		}
		alias, ok := strings.CutSuffix(strings.TrimPrefix(o.Key, dir), ".json")
		if !ok || strings.Contains(alias, "/") {
			continue // a history entry
		}
		st, err := r.settle(ctx, name, alias)
		if err != nil {
			return nil, err
		}
		aliases = append(aliases, st.Alias)
	}
	return aliases, nil
}

// Resolve returns the version a reference names: "name@version",
// "name@alias", or "name" for name@production. A version takes precedence
// over an alias of the same name, so that an alias can never redirect a
// reference to a fixed version.
func (r *Registry) Resolve(ctx context.Context, ref string) (Version, error) {
	name, sel, ok := strings.Cut(ref, "@")
	if !ok {
		sel = DefaultAlias
	}
	if err := validateName("model", name); err != nil {
		return Version{}, err
	}
	if err := validateName("version or alias", sel); err != nil {
		return Version{}, err
	}
	if ok {
		v, err := r.Get(ctx, name, sel)
		if !errors.Is(err, ErrNotFound) {
			return v, err
		}
	}
	st, err := r.settle(ctx, name, sel)
	if err != nil {
		return Version{}, err
	}
	if st.etag == "" {
		return Version{}, fmt.Errorf("%w: %q is neither a version nor an alias of %s", ErrNotFound, sel, name)
	}
	return r.Get(ctx, name, st.Version)
}

func validateAlias(name, alias string) error {
	if err := validateName("model", name); err != nil {
		return err
	}
	return validateName("alias", alias)
}
