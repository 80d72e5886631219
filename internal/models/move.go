package models

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Kinds of moves, as the history records them.
const (
	KindPromote  = "promote"
	KindRollback = "rollback"
)

// MoveRequest is one move of an alias, whoever asks for it: a deploy or
// canary node, a compensation, an operator's CLI. Every move goes through
// [Registry.Move], so one rule decides them all (see [Registry.Move]).
type MoveRequest struct {
	Model, Alias string
	// Kind is KindPromote (the default) or KindRollback.
	Kind string
	// To is the version to move to. Empty with KindRollback: the version
	// the alias named before its latest move (undo the latest move). Such
	// an undo fails with [ErrConcurrentMove] if the alias moves while it
	// is decided, rather than undo a move it has not seen.
	To string
	// IfFrom makes the move a compare-and-swap on what the alias names: it
	// happens only while the alias names From ("" for an alias never
	// set), so a move decided against one version never overwrites
	// another that someone moved the alias to meanwhile; else it fails
	// with [ErrConcurrentMove] and changes nothing.
	IfFrom bool
	From   string
	// Force moves the alias even to a version trained for an older logical
	// date than the one it names; the move is then recorded as forced.
	// Only a spec's author (a literal `force: true`) or an operator (the
	// CLI's --force) may set it.
	Force bool
	// Canary says the alias is a canary's own (it names the version
	// serving a canary's share, and goes back to production's version
	// when the canary ends): it is not ordered by date. Production aliases
	// never set it.
	Canary bool
	By     Actor
	Reason string
}

// Superseded is the error a move returns when the alias names a version
// trained for a later logical time than the version it would move to: the
// version the alias names (By) and the one refused (Version). It wraps
// ErrSuperseded.
type Superseded struct {
	Model, Alias string
	By           Version // the version the alias names
	Version      Version // the version the move was refused for
}

func (e *Superseded) Error() string {
	theirs, ours := TrainedFor(e.By.Meta, e.Version.Meta)
	return fmt.Sprintf("%s of %s names %s, trained for %s: %s, trained for %s, is of an earlier logical time and does not replace it unless forced",
		e.Alias, e.Model, e.By.Version, theirs, e.Version.Version, ours)
}

// TrainedFor says when two versions were trained for, as dates, or as
// full logical times where the dates are the same (two runs of one day:
// dates alone would read as equal while one is earlier).
func TrainedFor(a, b Meta) (string, string) {
	if a.LogicalDate() != b.LogicalDate() {
		return a.LogicalDate(), b.LogicalDate()
	}
	return a.LogicalTime, b.LogicalTime
}

func (e *Superseded) Unwrap() error { return ErrSuperseded }

// Promote points alias of model name at version under the date rule of
// [Registry.Move], unforced: a short form of Move.
func (r *Registry) Promote(ctx context.Context, name, alias, version string, by Actor, reason string) (Move, error) {
	return r.Move(ctx, MoveRequest{Model: name, Alias: alias, To: version, By: by, Reason: reason})
}

// Move moves an alias as req asks, by the one rule every move follows:
//
//   - An alias never moves to a version trained for an older logical time
//     than the version it names (a backfill's older date, a rollback to an
//     older model): such a move fails with a *[Superseded] and changes
//     nothing, unless req.Force, when it is recorded with Move.Forced.
//   - Except a compensation undoing its own run's move: a rollback by a run
//     (req.By.Run) while the alias still names what that run's move put
//     there, back to exactly the version that move replaced, restores
//     production's earlier state and is allowed.
//   - A version without a logical time, or an alias naming one (or a
//     deleted version), has nothing to order it by: the move is allowed.
//   - A canary's own alias (req.Canary) is not ordered.
//
// The rule is checked against the alias state the move replaces, by
// compare-and-swap on the history, so of two concurrent moves to
// different dates the later date wins whichever finishes last. Moving to
// the version the alias already names succeeds without a new history
// entry (Move.Changed is false).
func (r *Registry) Move(ctx context.Context, req MoveRequest) (Move, error) {
	req, err := r.checkRequest(ctx, req)
	if err != nil {
		return Move{}, err
	}
	// An undo of the latest move decides against what it has seen; every
	// other move is checked again after losing a race.
	retry := req.To != ""
	return r.move(ctx, req, retry)
}

// CheckMove says whether req would be allowed now, without moving
// anything: nil, or the error Move would return (a *[Superseded] when the
// date rule refuses). A canary asks it before sending any traffic.
func (r *Registry) CheckMove(ctx context.Context, req MoveRequest) error {
	req, err := r.checkRequest(ctx, req)
	if err != nil {
		return err
	}
	cur, err := r.settle(ctx, req.Model, req.Alias)
	if err != nil {
		return err
	}
	_, _, err = r.decide(ctx, req, cur)
	return err
}

func (r *Registry) checkRequest(ctx context.Context, req MoveRequest) (MoveRequest, error) {
	if err := validateAlias(req.Model, req.Alias); err != nil {
		return req, err
	}
	switch req.Kind {
	case "":
		req.Kind = KindPromote
	case KindPromote, KindRollback:
	default:
		return req, fmt.Errorf("models: unknown kind of move %q", req.Kind)
	}
	if req.To == "" {
		if req.Kind != KindRollback {
			return req, fmt.Errorf("%w: move %s of %s: no version to move to", ErrInvalidName, req.Alias, req.Model)
		}
		return req, nil
	}
	if _, err := r.Get(ctx, req.Model, req.To); err != nil {
		return req, fmt.Errorf("models: %s %s of %s to %s: %w", req.Kind, req.Alias, req.Model, req.To, err)
	}
	return req, nil
}

// decide picks the version req moves the alias to from its state cur,
// and whether the move overrides the date rule by force.
func (r *Registry) decide(ctx context.Context, req MoveRequest, cur aliasState) (string, bool, error) {
	to := req.To
	if to == "" { // undo the latest move
		if cur.etag == "" {
			return "", false, fmt.Errorf("%w: alias %s of %s is not set", ErrNotFound, req.Alias, req.Model)
		}
		last, err := r.readMove(ctx, req.Model, req.Alias, cur.Seq)
		if err != nil {
			return "", false, err
		}
		if last.From == "" {
			return "", false, fmt.Errorf("%w: %s of %s has only ever pointed at %s", ErrNoPrevious, req.Alias, req.Model, last.To)
		}
		to = last.From
	} else if req.Kind == KindRollback && cur.etag == "" {
		return "", false, fmt.Errorf("%w: alias %s of %s is not set", ErrNotFound, req.Alias, req.Model)
	}
	if cur.etag != "" && cur.Version == to {
		return to, false, nil // nothing moves: a retry is harmless
	}
	if req.IfFrom && cur.Version != req.From {
		return "", false, fmt.Errorf("%w: %s of %s names %s (move #%d), not %s as when the move was decided",
			ErrConcurrentMove, req.Alias, req.Model, cmpOrNone(cur.Version), cur.Seq, cmpOrNone(req.From))
	}
	sup, err := r.olderThanNamed(ctx, req, cur, to)
	if err != nil || sup == nil {
		return to, false, err
	}
	if !req.Force {
		return "", false, sup
	}
	return to, true, nil
}

// olderThanNamed applies the date rule: a *Superseded if to was trained
// for an older logical time than the version the alias names and no
// exception applies, else nil.
func (r *Registry) olderThanNamed(ctx context.Context, req MoveRequest, cur aliasState, to string) (*Superseded, error) {
	if req.Canary || cur.etag == "" || cur.Version == "" {
		return nil, nil
	}
	ours, err := r.Get(ctx, req.Model, to)
	if err != nil {
		return nil, err
	}
	ourTime, ok := logicalTime(ours.Meta)
	if !ok {
		return nil, nil // nothing to order it by
	}
	named, err := r.Get(ctx, req.Model, cur.Version)
	if errors.Is(err, ErrNotFound) {
		return nil, nil // an alias naming a deleted version orders nothing
	}
	if err != nil {
		return nil, err
	}
	theirTime, ok := logicalTime(named.Meta)
	if !ok || !theirTime.After(ourTime) {
		return nil, nil
	}
	if req.Kind == KindRollback && req.By.Run != "" {
		last, err := r.readMove(ctx, req.Model, req.Alias, cur.Seq)
		if err != nil {
			return nil, err
		}
		if last.Actor.Run == req.By.Run && last.To == cur.Version && last.From == to {
			return nil, nil // the run undoes its own move: production as it was
		}
	}
	return &Superseded{Model: req.Model, Alias: req.Alias, By: named, Version: ours}, nil
}

func logicalTime(m Meta) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339, m.LogicalTime)
	return t, err == nil
}

func cmpOrNone(v string) string {
	if v == "" {
		return "no version"
	}
	return v
}
