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
	Table      string   `json:"table"`
	SnapshotID any      `json:"snapshot_id"`
	Columns    []string `json:"columns"`
	Prefix     string   `json:"prefix"`
	Keys       JoinKeys `json:"keys"`
	// Files, with a split of files: Parquet files of features joined
	// point-in-time, as stage_features joins a feature table.
	Files           any    `json:"files"`
	Alignment       string `json:"alignment"`
	DateColumn      string `json:"date_column"`
	TimeColumn      string `json:"time_column"`
	EventTimeColumn string `json:"event_time_column"`
	LookbackDays    int    `json:"lookback_days"`
}

// joinWorkers bounds how many bucket units a split joins at once: each
// holds one unit's staging rows.
func joinWorkers() int { return min(runtime.GOMAXPROCS(0), 4) }

// checkJoin validates the shape of a `join:` list at validation time:
// staging tables (table:) for a split of a table, file sets (files:) with
// an alignment for a split of files.
func checkJoin(v any) error {
	if s, ok := v.(string); v == nil || ok && dags.HasRef(s) {
		return nil // a reference: checked when the node runs
	}
	list, ok := v.([]any)
	if !ok {
		return fmt.Errorf("join: want a list of {table, snapshot_id, columns, prefix, keys} or {files, keys, alignment, columns, prefix}, got %T", v)
	}
	for i, e := range list {
		if s, ok := e.(string); ok && dags.HasRef(s) {
			continue
		}
		m, ok := e.(map[string]any)
		if !ok {
			return fmt.Errorf("join[%d]: want a map with table, snapshot_id, columns, prefix, keys (or files, keys, alignment); got %T", i, e)
		}
		var err error
		if _, files := m["files"]; files {
			err = checkFilesEntry(m)
		} else {
			err = checkTableEntry(m)
		}
		if err != nil {
			return fmt.Errorf("join[%d]: %w", i, err)
		}
	}
	return nil
}

func checkTableEntry(m map[string]any) error {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		switch k {
		case "table", "snapshot_id", "columns", "prefix", "keys":
		default:
			return fmt.Errorf("unknown key %q (want table, snapshot_id, columns, prefix, keys; or files, keys, alignment, ... to join files)", k)
		}
	}
	if t, ok := m["table"].(string); !ok || t == "" {
		return fmt.Errorf("give the staging table, e.g. table: ${nodes.stage.outputs.staging_table} (or files: to join Parquet files)")
	}
	if s, ok := m["snapshot_id"]; ok && s != nil && !dags.HasRef(s) {
		if _, err := lakenode.SnapshotID(s); err != nil {
			return fmt.Errorf("snapshot_id: %w", err)
		}
	}
	if k, ok := m["keys"]; ok && k != nil && !dags.HasRef(k) {
		km, ok := k.(map[string]any)
		if !ok {
			return fmt.Errorf("keys: want a map of training column to staging column, e.g. {request_id: requestId}")
		}
		for name, v := range km {
			if s, ok := v.(string); !ok || s == "" {
				return fmt.Errorf("keys: %s: want the staging table's column name", name)
			}
		}
	}
	return nil
}

// checkFilesEntry checks a join of feature files.
func checkFilesEntry(m map[string]any) error {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		switch k {
		case "files", "keys", "alignment", "columns", "prefix", "date_column", "time_column", "event_time_column", "lookback_days":
		default:
			return fmt.Errorf("unknown key %q for a join of files (want files, keys, alignment, columns, prefix, date_column, time_column, event_time_column, lookback_days)", k)
		}
	}
	if f, ok := m["files"].(string); !ok || !dags.HasRef(f) {
		if ps, err := filePatterns(m["files"]); err != nil {
			return err
		} else if len(ps) == 0 {
			return fmt.Errorf("files: give the feature files, a glob or a list of globs")
		}
	}
	if a, ok := m["alignment"].(string); !ok || !dags.HasRef(a) {
		if !ok {
			return fmt.Errorf("give alignment: previous_day, as_of (on time_column, the feature rows' publication time) or same_day")
		}
		if _, err := backfill.ParseAlignment(a); err != nil {
			return fmt.Errorf("alignment: %w", err)
		}
	}
	switch k := m["keys"].(type) {
	case string:
		if !dags.HasRef(k) {
			return fmt.Errorf("keys: want a list of entity columns, e.g. [user_id]")
		}
	case []any:
		if len(k) == 0 {
			return fmt.Errorf("keys: give at least one entity column, e.g. [user_id]")
		}
		for _, e := range k {
			if s, ok := e.(string); !ok || s == "" {
				return fmt.Errorf("keys: want column names, got %v", e)
			}
		}
	case map[string]any:
		if len(k) == 0 {
			return fmt.Errorf("keys: give at least one entity column, e.g. [user_id]")
		}
		for name, v := range k {
			if s, ok := v.(string); !ok || s == "" {
				return fmt.Errorf("keys: %s: want the joined files' column name", name)
			}
		}
	default:
		return fmt.Errorf("give keys, the entity columns both sides have, e.g. [user_id]")
	}
	if n, ok := m["lookback_days"].(float64); ok && n < 1 {
		return fmt.Errorf("lookback_days must be at least 1, got %v", n)
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
		if e.Files != nil || e.Table == "" {
			return nil, nodetype.Permanent(errtype.BadInput, "join[%d]: a split of a table joins staging tables (table:); files join a split of files", i)
		}
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
