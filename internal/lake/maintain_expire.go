package lake

import (
	"context"
	"fmt"
	"sort"

	"github.com/apache/iceberg-go/table"
)

// expire removes the snapshots iceberg-go's ExpireSnapshots would remove
// (older than the limit, not main's head, not held by a ref) less those
// o.Keep and KeepLast protect.
//
// Why not iceberg-go's ExpireSnapshots alone: it has no way to keep chosen
// snapshots (v0.7.0 offers age and a count of main's ancestors, and refs;
// a tag per model version would work but is a metadata commit of its own
// and shows in every reader's refs). So its retention rules are run on a
// scratch transaction that is never committed, the protected snapshots
// are taken out of what it would remove, and the rest is removed with
// iceberg-go's own RemoveSnapshots update, guarded on every ref's head
// exactly as ExpireSnapshots guards it; that update's PostCommit, which
// Transaction.Commit would run, then deletes the manifest lists,
// manifests and data files no remaining snapshot references.
func (c *Catalog) expire(ctx context.Context, name string, o MaintainOptions, res *MaintainResult) error {
	id, err := Ident(name)
	if err != nil {
		return err
	}
	return c.redoOnConflict(ctx, name, "snapshot expiry", func(tbl *table.Table) error {
		expired, kept, err := planExpiry(tbl, o)
		if err != nil {
			return err
		}
		res.Expired, res.Kept = expired, kept
		if o.DryRun || len(expired) == 0 {
			return nil
		}
		var reqs []table.Requirement
		for ref, r := range tbl.Metadata().Refs() {
			head := r.SnapshotID
			reqs = append(reqs, table.AssertRefSnapshotID(ref, &head))
		}
		u := table.NewRemoveSnapshotsUpdate(expired, true)
		if _, _, err := c.cat.CommitTable(ctx, id, reqs, []table.Update{u}); err != nil {
			if IsConflict(err) {
				return err // planned again on the fresh table
			}
			return fmt.Errorf("commit: %w", err)
		}
		post, err := c.Load(ctx, name)
		if err != nil {
			return err
		}
		if err := u.PostCommit(ctx, tbl, post); err != nil {
			// Committed: the snapshots are gone. Their files are now
			// orphans, which a later orphan removal deletes.
			return fmt.Errorf("snapshots expired, but deleting their files failed (orphan removal will): %w", err)
		}
		c.log.Info("lake: snapshots expired", "table", name, "expired", len(expired), "kept_for_reasons", len(kept))
		return nil
	})
}

// planExpiry returns the snapshots to expire, oldest first, and those
// iceberg-go would have expired that are kept for a reason.
func planExpiry(tbl *table.Table, o MaintainOptions) (expired []int64, kept []KeptSnapshot, err error) {
	tx := tbl.NewTransaction()
	// RetainLast(1): main's head; the runs KeepLast protects are counted
	// below, where maintenance snapshots can be told apart.
	if err := tx.ExpireSnapshots(table.WithOlderThan(o.ExpireOlderThan), table.WithRetainLast(1), table.WithPostCommit(false)); err != nil {
		return nil, nil, fmt.Errorf("plan expiry: %w", err)
	}
	staged, err := tx.StagedTable()
	if err != nil {
		return nil, nil, fmt.Errorf("plan expiry: %w", err)
	}
	remaining := map[int64]bool{}
	for _, s := range staged.Metadata().Snapshots() {
		remaining[s.SnapshotID] = true
	}
	protect := rollbackKeep(tbl, o.KeepLast)
	for id, why := range o.Keep {
		if protect[id] == "" {
			protect[id] = why
		}
	}
	snaps := tbl.Metadata().Snapshots()
	sort.SliceStable(snaps, func(i, j int) bool { return snaps[i].SequenceNumber < snaps[j].SequenceNumber })
	for _, s := range snaps {
		if remaining[s.SnapshotID] {
			continue
		}
		if why := protect[s.SnapshotID]; why != "" {
			kept = append(kept, KeptSnapshot{ID: s.SnapshotID, Why: why})
			continue
		}
		expired = append(expired, s.SnapshotID)
	}
	return expired, kept, nil
}

// rollbackKeep returns the snapshots a rollback of main's last n runs
// needs: walking main's history back, the n most recent snapshots that are
// not maintenance and the parent of the oldest of them (each run's
// previous_snapshot_id is its snapshot's parent). Maintenance snapshots in
// between are kept too: they are what main's history goes through.
func rollbackKeep(tbl *table.Table, n int) map[int64]string {
	keep := map[int64]string{}
	cur := tbl.CurrentSnapshot()
	if cur == nil || n == 0 {
		return keep
	}
	runs := 0
	why := fmt.Sprintf("rollback of the last %d runs", n)
	for _, s := range table.AncestorsOf(cur.SnapshotID, tbl.Metadata().SnapshotByID) {
		keep[s.SnapshotID] = why
		if runs == n {
			break // the parent of the oldest run kept
		}
		if s.Summary == nil || s.Summary.Properties[PropMaintenance] == "" {
			runs++
		}
	}
	return keep
}
