package lake

import (
	"context"
	"fmt"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/colstats"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/number"
	"github.com/retrain-ml/retrain/nodetype"
)

// StatsWith is a feature_stats node's `with` block.
type StatsWith struct {
	Table string `json:"table" required:"true" doc:"namespace.table to profile (a staging table)"`
	// SnapshotID is a string or an exact integer (see SnapshotID).
	SnapshotID any      `json:"snapshot_id" type:"any" doc:"profile only the files this snapshot added, e.g. ${nodes.stage.outputs.snapshot_id} (default: the whole table)"`
	Columns    []string `json:"columns" doc:"columns (default: the staged features)"`
	StartDate  string   `json:"start_date" doc:"only rows from this date"`
	EndDate    string   `json:"end_date" doc:"only rows up to this date"`
	DateColumn string   `json:"date_column" default:"date" doc:"date column for the range"`
	// The thresholds are pointers: absent means no check, which 0 is not.
	MaxNullRate *float64 `json:"max_null_rate" doc:"fail if a column's null rate is above this (0..1)"`
	MinDistinct *int64   `json:"min_distinct" doc:"fail if a column has fewer distinct values"`
	MinStd      *float64 `json:"min_std" doc:"fail if a numeric column's standard deviation is below this"`
}

// spec is the profile w asks for; a snapshot id that is not one is bad
// input.
func (w StatsWith) spec() (features.StatsSpec, error) {
	spec := features.StatsSpec{
		Table: w.Table, Columns: w.Columns, StartDate: w.StartDate, EndDate: w.EndDate, DateColumn: w.DateColumn,
		Thresholds: colstats.Thresholds{MaxNullRate: w.MaxNullRate, MinDistinct: w.MinDistinct, MinStd: w.MinStd},
	}
	if w.SnapshotID != nil && w.SnapshotID != "" {
		id, err := SnapshotID(w.SnapshotID)
		if err != nil {
			return spec, nodetype.Permanent(errtype.BadInput, "snapshot_id: %v", err)
		}
		spec.SnapshotID = id
	}
	return spec, nil
}

// StatsOutputs are a feature_stats node's outputs.
type StatsOutputs struct {
	ReportURI  string   `json:"report_uri"`
	HTMLURI    string   `json:"html_uri"`
	Rows       int64    `json:"rows"`
	Columns    []string `json:"columns"`
	SnapshotID int64    `json:"snapshot_id,string"` // the snapshot profiled; a string: ids are 64-bit
	Scope      string   `json:"scope"`              // which rows were profiled, in words
	Dates      []string `json:"dates"`
	Files      int      `json:"files"`
	Summary    string   `json:"summary"` // rows and scope, for the run's node table
}

func (l *Lake) statsType() nodetype.Type {
	return nodetype.New(dags.NodeType{
		Name: "feature_stats",
		Doc: "Profile feature columns (count, null rate, mean, std, min/max, p50/p99, distinct) into a JSON and HTML report next to the table; " +
			"optional thresholds fail the node. With snapshot_id (a stage node's ${nodes.ID.outputs.snapshot_id}) only the files that snapshot " +
			"added are read: what this run staged, never partitions earlier runs left in the table. Outputs say which rows were profiled (scope, dates).",
		Check: func(with map[string]any) error {
			if r, ok := with["max_null_rate"].(float64); ok && (r < 0 || r > 1) {
				return fmt.Errorf("max_null_rate %v is not between 0 and 1", r)
			}
			if err := checkSnapshotID(with, "snapshot_id"); err != nil {
				return err
			}
			return CheckDates(with)
		},
	}, l.Stats)
}

// Stats runs a feature_stats node.
func (l *Lake) Stats(ctx context.Context, in nodetype.Input, w StatsWith) (StatsOutputs, error) {
	spec, err := w.spec()
	if err != nil {
		return StatsOutputs{}, err
	}
	cat, err := l.Open(ctx)
	if err != nil {
		return StatsOutputs{}, err
	}
	res, err := features.Stats(ctx, cat, spec, l.log(in))
	if err != nil {
		return StatsOutputs{}, Error(err)
	}
	return StatsOutputs{
		ReportURI: res.ReportURI, HTMLURI: res.HTMLURI, Rows: res.Rows, Columns: res.Columns,
		SnapshotID: res.Snapshot, Scope: res.Scope, Dates: res.Dates, Files: res.Files,
		Summary: fmt.Sprintf("%s rows: %s", number.Count(res.Rows), res.Scope),
	}, nil
}
