package lake

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/nodetype"
)

// RollbackWith is a rollback_table node's `with` block.
type RollbackWith struct {
	Table string `json:"table" required:"true" doc:"namespace.table"`
	// To and Snapshot are strings or exact integers (see SnapshotID).
	To       any `json:"to" type:"any" required:"true" doc:"the snapshot before the promotion (a string: ids are 64-bit): ${nodes.promote.outputs.previous_snapshot_id}"`
	Snapshot any `json:"snapshot" type:"any" doc:"the promotion's own snapshot: ${nodes.promote.outputs.snapshot_id}. With it, a rollback after other commits landed on the table commits a snapshot that removes only the promotion's files and restores those it replaced; without it, main is moved back only while this run's promotion is still its head, and the node fails otherwise"`
}

// RollbackOutputs are a rollback_table node's outputs. Ids are strings:
// they are 64-bit.
type RollbackOutputs struct {
	Table string `json:"table"`
	// Action is what the rollback did: moved_main (main moved back before
	// the promotion, metadata only), reverted (a new snapshot took the
	// promotion's files out) or nothing.
	Action              string `json:"action"`
	PromotionSnapshotID int64  `json:"promotion_snapshot_id,string"` // 0: not known
	FromSnapshotID      int64  `json:"from_snapshot_id,string"`      // main's head before
	ToSnapshotID        int64  `json:"to_snapshot_id,string"`        // main's head after
	FilesRemoved        int    `json:"files_removed"`
	FilesRestored       int    `json:"files_restored"`
	// FilesKept are the promotion's files left in partitions later commits
	// rewrote (PartitionsKept): those rows are the later commits' now.
	FilesKept      int    `json:"files_kept"`
	PartitionsKept int    `json:"partitions_kept"`
	Ancestor       bool   `json:"ancestor"`        // main moved back to an ancestor of its head (moved_main)
	SchemaRestored bool   `json:"schema_restored"` // the schema before the promotion is current again
	Schema         string `json:"schema"`          // what became of the promotion's schema change, and why
	NoOp           bool   `json:"noop"`            // nothing was changed: action nothing
	Note           string `json:"note"`
	Summary        string `json:"summary"` // one line for the run's node table
}

func (o RollbackOutputs) summary() string {
	var s string
	switch o.Action {
	case lake.UndoMovedMain:
		s = fmt.Sprintf("%s: main %d → %d", o.Table, o.FromSnapshotID, o.ToSnapshotID)
	case lake.UndoReverted:
		s = fmt.Sprintf("%s: later commits kept; snapshot %d undoes promotion %d: %d files removed, %d restored",
			o.Table, o.ToSnapshotID, o.PromotionSnapshotID, o.FilesRemoved, o.FilesRestored)
		if o.PartitionsKept > 0 {
			s += fmt.Sprintf(", %d partitions rewritten since left to later commits", o.PartitionsKept)
		}
	default:
		return fmt.Sprintf("%s: nothing to roll back: %s", o.Table, o.Note)
	}
	switch {
	case o.SchemaRestored:
		s += ", schema restored"
	case strings.HasPrefix(o.Schema, "kept"):
		s += ", schema kept"
	}
	return s
}

func (l *Lake) rollbackType() nodetype.Type {
	return nodetype.New(dags.NodeType{
		Name: "rollback_table",
		Doc: "Undo a promote_features node's promotion, and only it (its on_failure compensation): while the promotion is still the table's head, main moves back before it (metadata only, schema too); " +
			"when other commits landed after it, a new snapshot removes the promotion's files and restores those it replaced, leaving partitions later commits rewrote; needs `snapshot` for that, and fails rather than undo others' commits without it.",
		Check: func(with map[string]any) error {
			if err := checkSnapshotID(with, "to"); err != nil {
				return err
			}
			return checkSnapshotID(with, "snapshot")
		},
	}, l.Rollback)
}

// Rollback runs a rollback_table node.
func (l *Lake) Rollback(ctx context.Context, in nodetype.Input, w RollbackWith) (RollbackOutputs, error) {
	if _, err := lake.Ident(w.Table); err != nil {
		return RollbackOutputs{}, nodetype.Permanent(errtype.BadInput, "table: %v", err)
	}
	to, err := SnapshotID(w.To)
	if err != nil {
		return RollbackOutputs{}, nodetype.Permanent(errtype.BadInput, "to: %v", err)
	}
	var snap int64
	if w.Snapshot != nil {
		if snap, err = SnapshotID(w.Snapshot); err != nil {
			return RollbackOutputs{}, nodetype.Permanent(errtype.BadInput, "snapshot: %v", err)
		}
	}
	out := RollbackOutputs{Table: w.Table, PromotionSnapshotID: snap}
	if w.Snapshot != nil && snap == to {
		out.Action, out.NoOp = lake.UndoNothing, true
		out.Note = fmt.Sprintf("the promotion changed nothing (its snapshot %d is the one before it)", snap)
		out.FromSnapshotID, out.ToSnapshotID = to, to
		out.Summary = out.summary()
		return out, nil
	}
	cat, err := l.Open(ctx)
	if err != nil {
		return RollbackOutputs{}, err
	}
	opts := lake.UndoOptions{Parent: to}
	if w.Snapshot == nil {
		// A spec from before `snapshot`: find this run's promotion, and
		// only move main back off it.
		tbl, err := cat.Load(ctx, w.Table)
		if err != nil {
			return RollbackOutputs{}, Error(err)
		}
		if tbl.Metadata().SnapshotByID(to) == nil {
			return RollbackOutputs{}, Error(fmt.Errorf("table %s has no snapshot %d: %w", w.Table, to, lake.ErrNoSuchSnapshot))
		}
		found, ok := runPromotion(tbl, in.RunID, to)
		if !ok {
			head := tbl.CurrentSnapshot()
			if head != nil && head.SnapshotID == to {
				out.Action, out.NoOp = lake.UndoNothing, true
				out.Note = fmt.Sprintf("main is at snapshot %d, the one before the promotion, which committed nothing on it", to)
				out.FromSnapshotID, out.ToSnapshotID = to, to
				out.Summary = out.summary()
				return out, nil
			}
			return RollbackOutputs{}, nodetype.Permanent(errtype.ConcurrentMove,
				"table %s: main is at snapshot %d and no snapshot on %d was made by this run's promotion; moving main back to %d could undo other runs' commits, so it was left alone (give the node `snapshot: ${nodes.<promote node>.outputs.snapshot_id}` to remove only the promotion's files)",
				w.Table, headID(head), to, to)
		}
		snap, opts.MoveOnly = found, true
		out.PromotionSnapshotID = snap
	}
	res, err := cat.UndoCommit(ctx, w.Table, snap, opts)
	switch {
	case errors.Is(err, lake.ErrLaterCommits):
		return RollbackOutputs{}, nodetype.Permanent(errtype.ConcurrentMove,
			"%v (give the node `snapshot: ${nodes.<promote node>.outputs.snapshot_id}` to remove only the promotion's files)", err)
	case errors.Is(err, lake.ErrNotParent):
		return RollbackOutputs{}, nodetype.Permanent(errtype.BadInput, "snapshot and to: %v", err)
	case errors.Is(err, lake.ErrFilesGone):
		return RollbackOutputs{}, nodetype.Permanent(errtype.CheckFailed, "%v", err)
	case err != nil:
		return RollbackOutputs{}, Error(err)
	}
	out.Action, out.FromSnapshotID, out.ToSnapshotID = res.Action, res.From, res.To
	out.FilesRemoved, out.FilesRestored, out.FilesKept, out.PartitionsKept = res.Removed, res.Restored, res.Kept, res.KeptPartitions
	out.Ancestor = res.Action == lake.UndoMovedMain
	out.SchemaRestored, out.Schema, out.Note = res.SchemaRestored, res.Schema, res.Note
	out.NoOp = res.Action == lake.UndoNothing
	out.Summary = out.summary()
	l.log(in).Info("rolled back", "table", w.Table, "action", res.Action, "promotion", snap, "from", res.From, "to", res.To,
		"removed", res.Removed, "restored", res.Restored, "kept", res.Kept, "gone", res.Gone, "schema", res.Schema, "already", res.Already, "note", res.Note)
	return out, nil
}

func headID(s *table.Snapshot) int64 {
	if s == nil {
		return 0
	}
	return s.SnapshotID
}

// runPromotion finds the snapshot that run's promotion committed on
// snapshot parent, by the promotion id its summary records (see
// PromoteFeatures: RUN/NODE/EXECUTION/ROUND).
func runPromotion(tbl *table.Table, run string, parent int64) (int64, bool) {
	for _, s := range tbl.Metadata().Snapshots() {
		if s.ParentSnapshotID == nil || *s.ParentSnapshotID != parent || s.Summary == nil {
			continue
		}
		if promotionRun(s.Summary.Properties[features.PropPromotionID]) == run && run != "" {
			return s.SnapshotID, true
		}
	}
	return 0, false
}

// promotionRun is the run id in a promotion id: all but its last three
// parts (node ids, execution ids and round numbers hold no "/"; run ids
// may).
func promotionRun(id string) string {
	for range 3 {
		i := strings.LastIndexByte(id, '/')
		if i < 0 {
			return ""
		}
		id = id[:i]
	}
	return id
}
