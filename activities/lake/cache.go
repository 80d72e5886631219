package lake

import (
	"context"
	"fmt"
	"strconv"

	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/nodetype"
)

// The node cache's versions of the lake's types: bump one when the same
// inputs make other outputs.
const (
	stageCacheVersion = 1
	statsCacheVersion = 1
)

// CurrentSnapshot is the snapshot id of table's main now (0 for a table
// with none).
func CurrentSnapshot(tbl *table.Table) int64 {
	if cur := tbl.CurrentSnapshot(); cur != nil {
		return cur.SnapshotID
	}
	return 0
}

// RowsSnapshot is the snapshot of the training table's rows as stage
// reads them: main's newest snapshot not committed by a promotion. A
// promotion replaces the feature columns of the rows it covers and
// leaves their keys, dates and event times as they were, which is all
// stage reads of the training table; so promoting a run's own staged
// features does not change what the next run's stage reads, while any
// other commit (new rows, a rewrite) does.
func RowsSnapshot(tbl *table.Table) int64 {
	cur := tbl.CurrentSnapshot()
	if cur == nil {
		return 0
	}
	for _, s := range table.AncestorsOf(cur.SnapshotID, tbl.Metadata().SnapshotByID) {
		if s.Summary == nil || s.Summary.Properties[features.PropPromotionID] == "" {
			return s.SnapshotID
		}
	}
	return cur.SnapshotID
}

// snapshots reads tables' snapshot ids with pick.
func (l *Lake) snapshots(ctx context.Context, ids nodetype.Identities, pick func(*table.Table) int64, names ...string) error {
	cat, err := l.Open(ctx)
	if err != nil {
		return err
	}
	for _, name := range names {
		tbl, err := cat.Load(ctx, name)
		if err != nil {
			return Error(err)
		}
		ids.Table(name, pick(tbl))
	}
	return nil
}

// stageCache keys a stage_features node on the feature table's snapshot
// and the training table's rows (RowsSnapshot); a hit is served only
// while the staging table still holds the cached snapshot as its main:
// promote reads the staging table's main.
func (l *Lake) stageCache() nodetype.Cache {
	return nodetype.Cache{
		Version: stageCacheVersion,
		Inputs: func(ctx context.Context, in nodetype.Input, _ []string) (nodetype.Identities, error) {
			w, err := nodetype.DecodeWith[StageWith](in.With)
			if err != nil {
				return nil, err
			}
			ids := nodetype.Identities{}
			if err := l.snapshots(ctx, ids, CurrentSnapshot, w.FeatureTable); err != nil {
				return nil, err
			}
			if err := l.snapshots(ctx, ids, RowsSnapshot, w.TrainingTable); err != nil {
				return nil, err
			}
			return ids, nil
		},
		Verify: func(ctx context.Context, _ nodetype.Input, outputs map[string]any) (string, error) {
			name, _ := outputs["staging_table"].(string)
			want, err := SnapshotID(outputs["snapshot_id"])
			if name == "" || err != nil {
				return "the cached outputs name no staging snapshot", nil
			}
			cat, err := l.Open(ctx)
			if err != nil {
				return "", err
			}
			tbl, err := cat.Load(ctx, name)
			if err != nil {
				return fmt.Sprintf("staging table %s: %v", name, err), nil
			}
			if tbl.Metadata().SnapshotByID(want) == nil {
				return fmt.Sprintf("snapshot %d of %s expired", want, name), nil
			}
			if got := CurrentSnapshot(tbl); got != want {
				return fmt.Sprintf("staging table %s moved from snapshot %d to %d", name, want, got), nil
			}
			return "", nil
		},
	}
}

// statsCache keys a feature_stats node on the snapshot it profiles: the
// one its `with` names, else the table's current one.
func (l *Lake) statsCache() nodetype.Cache {
	return nodetype.Cache{
		Version: statsCacheVersion,
		Inputs: func(ctx context.Context, in nodetype.Input, _ []string) (nodetype.Identities, error) {
			w, err := nodetype.DecodeWith[StatsWith](in.With)
			if err != nil {
				return nil, err
			}
			ids := nodetype.Identities{}
			if w.SnapshotID == nil || w.SnapshotID == "" {
				if err := l.snapshots(ctx, ids, CurrentSnapshot, w.Table); err != nil {
					return nil, err
				}
			}
			return ids, nil
		},
		Verify: func(ctx context.Context, in nodetype.Input, outputs map[string]any) (string, error) {
			w, err := nodetype.DecodeWith[StatsWith](in.With)
			if err != nil {
				return "", err
			}
			snap, err := SnapshotID(outputs["snapshot_id"])
			if err != nil {
				return "the cached outputs name no snapshot", nil
			}
			return l.snapshotGone(ctx, w.Table, snap)
		},
	}
}

// snapshotGone says why table's snapshot snap can no longer be read (it
// was expired by table maintenance, or the table dropped), "" if it can.
func (l *Lake) snapshotGone(ctx context.Context, name string, snap int64) (string, error) {
	cat, err := l.Open(ctx)
	if err != nil {
		return "", err
	}
	tbl, err := cat.Load(ctx, name)
	if err != nil {
		return fmt.Sprintf("table %s: %v", name, err), nil
	}
	if tbl.Metadata().SnapshotByID(snap) == nil {
		return fmt.Sprintf("snapshot %s of %s expired", strconv.FormatInt(snap, 10), name), nil
	}
	return "", nil
}

// SnapshotGone is snapshotGone for the lake's other node types (split).
func (l *Lake) SnapshotGone(ctx context.Context, name string, snap int64) (string, error) {
	return l.snapshotGone(ctx, name, snap)
}

// Snapshots records the current snapshot of each table in ids.
func (l *Lake) Snapshots(ctx context.Context, ids nodetype.Identities, names ...string) error {
	return l.snapshots(ctx, ids, CurrentSnapshot, names...)
}
