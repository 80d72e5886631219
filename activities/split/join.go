package split

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"slices"

	"github.com/apache/iceberg-go/table"

	lakenode "github.com/retrain-ml/retrain/activities/lake"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/nodetype"
)

// JoinEntry is one staging table a split joins onto the training rows as
// it reads them, so an experiment trains on a feature group without
// promoting it into the training table first.
type JoinEntry struct {
	Table      string            `json:"table"`
	SnapshotID any               `json:"snapshot_id"`
	Columns    []string          `json:"columns"`
	Prefix     string            `json:"prefix"`
	Keys       map[string]string `json:"keys"`
}

// joinWorkers bounds how many bucket units a split joins at once: each
// holds one unit's staging rows.
func joinWorkers() int { return min(runtime.GOMAXPROCS(0), 4) }

// checkJoin validates the shape of a `join:` list at validation time.
func checkJoin(v any) error {
	if s, ok := v.(string); v == nil || ok && dags.HasRef(s) {
		return nil // a reference: checked when the node runs
	}
	list, ok := v.([]any)
	if !ok {
		return fmt.Errorf("join: want a list of {table, snapshot_id, columns, prefix, keys}, got %T", v)
	}
	for i, e := range list {
		if s, ok := e.(string); ok && dags.HasRef(s) {
			continue
		}
		m, ok := e.(map[string]any)
		if !ok {
			return fmt.Errorf("join[%d]: want a map with table, snapshot_id, columns, prefix, keys; got %T", i, e)
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			switch k {
			case "table", "snapshot_id", "columns", "prefix", "keys":
			default:
				return fmt.Errorf("join[%d]: unknown key %q (want table, snapshot_id, columns, prefix, keys)", i, k)
			}
		}
		if t, ok := m["table"].(string); !ok || t == "" {
			return fmt.Errorf("join[%d]: give the staging table, e.g. table: ${nodes.stage.outputs.staging_table}", i)
		}
		if s, ok := m["snapshot_id"]; ok && s != nil && !dags.HasRef(s) {
			if _, err := lakenode.SnapshotID(s); err != nil {
				return fmt.Errorf("join[%d]: snapshot_id: %w", i, err)
			}
		}
		if k, ok := m["keys"]; ok && k != nil && !dags.HasRef(k) {
			km, ok := k.(map[string]any)
			if !ok {
				return fmt.Errorf("join[%d]: keys: want a map of training column to staging column, e.g. {request_id: requestId}", i)
			}
			for name, v := range km {
				if s, ok := v.(string); !ok || s == "" {
					return fmt.Errorf("join[%d]: keys: %s: want the staging table's column name", i, name)
				}
			}
		}
	}
	return nil
}

// planJoin checks the split's join entries against the training table at
// snap; nil when there are none.
func planJoin(ctx context.Context, cat *lake.Catalog, tbl *table.Table, snap int64, w With, window backfill.DateRange) (*features.Join, error) {
	if len(w.Join) == 0 {
		return nil, nil
	}
	specs := make([]features.JoinSpec, len(w.Join))
	for i, e := range w.Join {
		specs[i] = features.JoinSpec{Table: e.Table, Columns: e.Columns, Prefix: e.Prefix, Keys: e.Keys}
		if e.SnapshotID != nil && e.SnapshotID != "" {
			id, err := lakenode.SnapshotID(e.SnapshotID)
			if err != nil {
				return nil, nodetype.Permanent(errtype.BadInput, "join[%d] %s: snapshot_id: %v", i, e.Table, err)
			}
			specs[i].Snapshot = id
		}
	}
	return features.PlanJoin(ctx, cat, tbl, snap, w.DateColumn, window, specs)
}
