package lake

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/apache/iceberg-go/table"
)

// MainBranch is the branch readers see.
const MainBranch = table.MainBranch

// maxCommitAttempts bounds how often Update redoes a commit that lost a
// race before giving up; each redo rebuilds the change from a fresh table.
const maxCommitAttempts = 8

// IsConflict reports whether a commit failed because the table moved
// underneath it (another writer committed first). Such a commit changed
// nothing and may be redone on the fresh table. iceberg-go reports this as
// ErrCommitFailed from the catalog's compare-and-swap, as ErrCommitDiverged
// from its own validation, or, when the catalog checks requirements itself
// (the sql catalog), as a failed "branch main has changed" requirement; a
// PostgreSQL catalog may also abort it as a serialization failure.
func IsConflict(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, table.ErrCommitFailed) || errors.Is(err, table.ErrCommitDiverged) {
		return true
	}
	// PostgreSQL rolled the catalog's transaction back: nothing changed.
	if isSerializationFailure(err) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "requirement failed") && strings.Contains(msg, "has changed")
}

// BuildFunc stages a change on tx, a transaction on tbl whose main branch
// is pinned: the commit fails, rather than being replayed by iceberg-go,
// if any other snapshot lands on main first. It must derive everything
// from tbl, because Update calls it again on a reloaded table after a
// conflict. Staging nothing is allowed and commits nothing.
type BuildFunc func(ctx context.Context, tbl *table.Table, tx *table.Transaction) error

// Update loads a table, lets build stage a change and commits it. Commits
// to one table from this process are serialized; a commit that loses a
// race with another process is redone from a fresh load, so the change is
// never lost and, because the failed commit changed nothing, never applied
// twice. It returns the committed table.
func (c *Catalog) Update(ctx context.Context, name string, build BuildFunc) (*table.Table, error) {
	m := c.lock(name)
	m.Lock()
	defer m.Unlock()
	var lastErr error
	for attempt := 1; attempt <= maxCommitAttempts; attempt++ {
		tbl, err := c.Load(ctx, name)
		if err != nil {
			return nil, err
		}
		tx := tbl.NewTransaction()
		if err := tx.AssertRefSnapshotID(MainBranch); err != nil {
			return nil, fmt.Errorf("pin %s main: %w", name, err)
		}
		if err := build(ctx, tbl, tx); err != nil {
			return nil, err
		}
		committed, err := tx.Commit(ctx)
		if err == nil {
			return committed, nil
		}
		if !IsConflict(err) {
			return nil, fmt.Errorf("commit %s: %w", name, err)
		}
		lastErr = err
		c.log.Info("lake: commit lost a race; redoing on the fresh table", "table", name, "attempt", attempt, "error", err)
		if err := sleep(ctx, time.Duration(attempt*attempt)*20*time.Millisecond); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("commit %s: still conflicting after %d attempts: %w", name, maxCommitAttempts, lastErr)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// redoOnConflict runs once on a fresh load of the table until it does not
// fail with a conflict (IsConflict), at most maxCommitAttempts times, with
// this process's commits to the table serialized: the loop Rollback and
// snapshot expiry share. what names the operation in logs and errors.
func (c *Catalog) redoOnConflict(ctx context.Context, name, what string, once func(tbl *table.Table) error) error {
	m := c.lock(name)
	m.Lock()
	defer m.Unlock()
	var lastErr error
	for attempt := 1; attempt <= maxCommitAttempts; attempt++ {
		tbl, err := c.Load(ctx, name)
		if err != nil {
			return err
		}
		err = once(tbl)
		if err == nil || !IsConflict(err) {
			return err
		}
		lastErr = err
		c.log.Info("lake: "+what+" lost a race; redoing on the fresh table", "table", name, "attempt", attempt, "error", err)
		if err := sleep(ctx, time.Duration(attempt*attempt)*20*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("%s %s: still conflicting after %d attempts: %w", what, name, maxCommitAttempts, lastErr)
}
