package lake

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/apache/iceberg-go/table"
)

// ErrNoSuchSnapshot is returned (wrapped) for a snapshot id a table lacks.
var ErrNoSuchSnapshot = errors.New("no such snapshot")

// SnapshotInfo describes one snapshot of a table. Ids are JSON strings:
// they are 64-bit and JSON numbers lose precision in most readers.
type SnapshotInfo struct {
	ID        int64             `json:"snapshot_id,string"`
	ParentID  *int64            `json:"parent_id,string,omitempty"`
	Sequence  int64             `json:"sequence_number"`
	Time      time.Time         `json:"timestamp"`
	Operation string            `json:"operation,omitempty"`
	SchemaID  *int              `json:"schema_id,omitempty"`
	Summary   map[string]string `json:"summary,omitempty"`
	Current   bool              `json:"current"` // head of main
	OnMain    bool              `json:"on_main"` // main's head or one of its ancestors
}

// Snapshots lists a table's snapshots, oldest first.
func Snapshots(tbl *table.Table) []SnapshotInfo {
	meta := tbl.Metadata()
	onMain := map[int64]bool{}
	var current int64
	if cur := tbl.CurrentSnapshot(); cur != nil {
		current = cur.SnapshotID
		for _, s := range table.AncestorsOf(cur.SnapshotID, meta.SnapshotByID) {
			onMain[s.SnapshotID] = true
		}
	}
	snaps := meta.Snapshots()
	out := make([]SnapshotInfo, 0, len(snaps))
	for _, s := range snaps {
		info := SnapshotInfo{
			ID:       s.SnapshotID,
			ParentID: s.ParentSnapshotID,
			Sequence: s.SequenceNumber,
			Time:     time.UnixMilli(s.TimestampMs).UTC(),
			SchemaID: s.SchemaID,
			Current:  s.SnapshotID == current,
			OnMain:   onMain[s.SnapshotID],
		}
		if s.Summary != nil {
			info.Operation = string(s.Summary.Operation)
			info.Summary = map[string]string(s.Summary.Properties)
		}
		out = append(out, info)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Sequence < out[j].Sequence })
	return out
}

// RollbackResult says what a rollback did.
type RollbackResult struct {
	Table    string `json:"table"`
	From     int64  `json:"from_snapshot_id,string"`
	To       int64  `json:"to_snapshot_id,string"`
	Ancestor bool   `json:"ancestor"` // To was an ancestor of main's head
	Schema   bool   `json:"schema"`   // the snapshot's schema was made current again
	NoOp     bool   `json:"noop"`     // main was already at To
	Metadata string `json:"metadata_location"`
}

// Rollback moves a table's main branch to snapshot to and makes that
// snapshot's schema current again, so that reading the table afterwards
// gives exactly what reading it at that snapshot gave: columns added since
// are hidden again (their ids stay retired). It rewrites metadata only: no
// data file is read or written.
//
// An ancestor of main's head is rolled back with iceberg-go's
// RollbackToSnapshot; any other snapshot of the table (for example the
// head of an abandoned line after an earlier rollback) is set as main's
// head with a SetSnapshotRef update guarded by an AssertRefSnapshotID
// requirement on the head it replaces. Both fail rather than clobber a
// concurrent commit, and are then redone on the fresh table.
func (c *Catalog) Rollback(ctx context.Context, name string, to int64) (RollbackResult, error) {
	id, err := Ident(name)
	if err != nil {
		return RollbackResult{}, err
	}
	var res RollbackResult
	err = c.redoOnConflict(ctx, name, "rollback", func(tbl *table.Table) (err error) {
		res, err = rollbackOnce(ctx, c, id, tbl, to)
		return err
	})
	return res, err
}

func rollbackOnce(ctx context.Context, c *Catalog, id table.Identifier, tbl *table.Table, to int64) (RollbackResult, error) {
	name := Name(id)
	res := RollbackResult{Table: name, To: to}
	target := tbl.SnapshotByID(to)
	if target == nil {
		return res, fmt.Errorf("table %s has no snapshot %d: %w", name, to, ErrNoSuchSnapshot)
	}
	meta := tbl.Metadata()
	cur := tbl.CurrentSnapshot()
	if cur == nil {
		return res, fmt.Errorf("table %s has no current snapshot to roll back from", name)
	}
	res.From = cur.SnapshotID
	curSchema := tbl.Schema().ID
	wantSchema := curSchema
	if target.SchemaID != nil {
		wantSchema = *target.SchemaID
	}
	res.Schema = wantSchema != curSchema
	if cur.SnapshotID == to && !res.Schema {
		res.NoOp, res.Ancestor, res.Metadata = true, true, tbl.MetadataLocation()
		return res, nil
	}
	for _, s := range table.AncestorsOf(cur.SnapshotID, meta.SnapshotByID) {
		if s.SnapshotID == to {
			res.Ancestor = true
			break
		}
	}

	if res.Ancestor && !res.Schema {
		tx := tbl.NewTransaction()
		if err := tx.RollbackToSnapshot(to); err != nil {
			return res, fmt.Errorf("rollback %s to %d: %w", name, to, err)
		}
		committed, err := tx.Commit(ctx)
		if err != nil {
			return res, fmt.Errorf("rollback %s to %d: %w", name, to, err)
		}
		res.Metadata = committed.MetadataLocation()
		return res, nil
	}

	// Not an ancestor, or the schema must move too: one catalog commit
	// with both updates, guarded on the head and schema it replaces.
	head := cur.SnapshotID
	reqs := []table.Requirement{table.AssertRefSnapshotID(MainBranch, &head)}
	var updates []table.Update
	if res.Schema {
		reqs = append(reqs, table.AssertCurrentSchemaID(curSchema))
		updates = append(updates, table.NewSetCurrentSchemaUpdate(wantSchema))
	}
	if cur.SnapshotID != to {
		updates = append(updates, table.NewSetSnapshotRefUpdate(MainBranch, to, table.BranchRef, 0, 0, 0))
	}
	_, loc, err := c.cat.CommitTable(ctx, id, reqs, updates)
	if err != nil {
		return res, fmt.Errorf("rollback %s to %d: %w", name, to, err)
	}
	res.Metadata = loc
	return res, nil
}
