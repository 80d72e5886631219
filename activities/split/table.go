package split

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go/table"

	lakenode "github.com/retrain-ml/retrain/activities/lake"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/dataset"
	"github.com/retrain-ml/retrain/nodetype"
)

// openTable loads the split's table at its snapshot, checks the staging
// tables it joins and infers the split's schema, before anything is read.
func (s *Splits) openTable(ctx context.Context, w With, window backfill.DateRange, _ dataset.Limits) (*tableSource, error) {
	lk := &lakenode.Lake{Catalog: s.Catalog, Logger: s.Logger}
	cat, err := lk.Open(ctx)
	if err != nil {
		return nil, err
	}
	tbl, err := cat.Load(ctx, w.Table)
	if err != nil {
		return nil, lakenode.Error(err)
	}
	var snap int64
	if w.SnapshotID != nil && w.SnapshotID != "" {
		if snap, err = lakenode.SnapshotID(w.SnapshotID); err != nil {
			return nil, nodetype.Permanent(errtype.BadInput, "snapshot_id: %v", err)
		}
		if tbl.Metadata().SnapshotByID(snap) == nil {
			return nil, nodetype.Permanent(errtype.BadInput, "table %s has no snapshot %d", w.Table, snap)
		}
	} else {
		cur := tbl.CurrentSnapshot()
		if cur == nil {
			return nil, nodetype.Permanent(errtype.BadInput, "table %s has no data", w.Table)
		}
		snap = cur.SnapshotID
	}
	projection, err := tbl.Scan(table.WithSnapshotID(snap)).Projection()
	if err != nil {
		return nil, fmt.Errorf("schema of %s at snapshot %d: %w", w.Table, snap, err)
	}
	arrowSchema, err := table.SchemaToArrowSchema(projection, nil, true, false)
	if err != nil {
		return nil, err
	}
	// Staging tables are checked before anything is read or written.
	join, err := planJoin(ctx, cat, tbl, snap, w, window)
	if err != nil {
		return nil, lakenode.Error(err)
	}
	var joined []string
	if join != nil {
		arrowSchema = arrow.NewSchema(append(slices.Clone(arrowSchema.Fields()), join.Fields()...), nil)
		for _, c := range join.Columns() {
			joined = append(joined, c.Name)
		}
	}
	schema, err := dataset.Infer(arrowSchema, w.Label, w.DateColumn, w.RequestID, w.Dense, w.Sparse, w.Slice)
	if err != nil {
		return nil, nodetype.Permanent(errtype.BadInput, "table %s: %v", w.Table, err)
	}
	return &tableSource{tbl: tbl, table: w.Table, snap: snap, schema: schema, join: join, joined: joined}, nil
}

// openFiles lists the split's files, prunes them by folder date and
// reads the first kept one's schema, before anything is written.
func (s *Splits) openFiles(ctx context.Context, patterns []string, w With, loc *time.Location, window backfill.DateRange) (*filesSource, error) {
	files, err := expandFiles(ctx, s.Store, s.Env, patterns)
	if err == nil {
		var fs *filesSource
		if fs, err = newFilesSource(ctx, s.Store, files, patterns, w.DateColumn, loc, window); err == nil {
			return fs, nil
		}
	}
	return nil, filesError(err)
}
