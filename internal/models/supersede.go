package models

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Superseded is the error PromoteUnlessNewer returns when the alias names a
// version trained for a later logical time: that version, and when it was
// trained for. It wraps ErrSuperseded.
type Superseded struct {
	Model, Alias string
	By           Version // the version the alias names
}

func (e *Superseded) Error() string {
	return fmt.Sprintf("%s of %s names %s, trained for %s: a version of an earlier date does not replace it",
		e.Alias, e.Model, e.By.Version, e.By.LogicalTime)
}

func (e *Superseded) Unwrap() error { return ErrSuperseded }

// PromoteUnlessNewer is Promote, unless the alias names a version whose
// logical time is later than version's: then it moves nothing and fails
// with a *Superseded. The check is made against the alias state the move
// replaces, by compare-and-swap, so of two concurrent deploys of different
// dates the later date wins whichever finishes last. A version without a
// logical time (or an alias naming one) is promoted as by Promote: there
// is nothing to order it by.
func (r *Registry) PromoteUnlessNewer(ctx context.Context, name, alias, version string, by Actor, reason string) (Move, error) {
	if err := validateAlias(name, alias); err != nil {
		return Move{}, err
	}
	v, err := r.Get(ctx, name, version)
	if err != nil {
		return Move{}, fmt.Errorf("models: promote %s@%s to %s: %w", name, version, alias, err)
	}
	ours, ok := logicalTime(v.Meta)
	return r.move(ctx, name, alias, "promote", by, reason, true, func(cur aliasState) (string, error) {
		if !ok || cur.etag == "" || cur.Version == "" || cur.Version == version {
			return version, nil
		}
		named, err := r.Get(ctx, name, cur.Version)
		if errors.Is(err, ErrNotFound) {
			return version, nil // an alias naming a deleted version orders nothing
		}
		if err != nil {
			return "", err
		}
		if theirs, ok := logicalTime(named.Meta); ok && theirs.After(ours) {
			return "", &Superseded{Model: name, Alias: alias, By: named}
		}
		return version, nil
	})
}

func logicalTime(m Meta) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339, m.LogicalTime)
	return t, err == nil
}
