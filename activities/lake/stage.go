package lake

import (
	"context"
	"fmt"
	"time"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/number"
	"github.com/retrain-ml/retrain/nodetype"
)

// StageWith is a stage_features node's `with` block.
type StageWith struct {
	TrainingTable     string   `json:"training_table" required:"true" doc:"namespace.table of the training data"`
	FeatureTable      string   `json:"feature_table" required:"true" doc:"namespace.table of the feature group"`
	Keys              []string `json:"keys" required:"true" doc:"entity key column(s), in both tables"`
	StartDate         string   `json:"start_date" required:"true" doc:"first training date, YYYY-MM-DD"`
	EndDate           string   `json:"end_date" required:"true" doc:"last training date, inclusive"`
	Alignment         string   `json:"alignment" required:"true" doc:"same_day, previous_day or as_of"`
	Features          []string `json:"features" doc:"feature columns (default: all but keys and time columns)"`
	Prefix            string   `json:"prefix" doc:"prefix for the staged column names"`
	StagingTable      string   `json:"staging_table" doc:"output table (default: <ns>.<training>__stage__<feature table>)"`
	DateColumn        string   `json:"date_column" default:"date" doc:"date column"`
	EventTimeColumn   string   `json:"event_time_column" default:"event_ts" doc:"training event time, for as_of"`
	FeatureTimeColumn string   `json:"feature_time_column" default:"ts" doc:"feature row time, for as_of"`
	LookbackDays      int      `json:"lookback_days" default:"7" doc:"as_of: how many days back a feature row may be"`
}

// spec is the staging job w asks for.
func (w StageWith) spec() features.StageSpec {
	return features.StageSpec{
		Training: w.TrainingTable, Feature: w.FeatureTable, Keys: w.Keys,
		StartDate: w.StartDate, EndDate: w.EndDate, Alignment: w.Alignment,
		Features: w.Features, Prefix: w.Prefix, Staging: w.StagingTable,
		DateColumn: w.DateColumn, EventTimeColumn: w.EventTimeColumn, FeatureTimeColumn: w.FeatureTimeColumn,
		LookbackDays: w.LookbackDays,
	}
}

// StageOutputs are a stage_features node's outputs.
type StageOutputs struct {
	StagingTable   string   `json:"staging_table"`
	SnapshotID     int64    `json:"snapshot_id,string"` // a string: ids are 64-bit
	Rows           int64    `json:"rows"`
	Matched        int64    `json:"matched"` // rows that joined a feature row
	FeatureColumns []string `json:"feature_columns"`
	Location       string   `json:"location"`
	StartDate      string   `json:"start_date"`
	EndDate        string   `json:"end_date"`
	Summary        string   `json:"summary"` // one line for the run's node table
}

func (o StageOutputs) summary() string {
	dates := o.StartDate + ".." + o.EndDate
	if a, err := time.Parse(time.DateOnly, o.StartDate); err == nil {
		if b, err := time.Parse(time.DateOnly, o.EndDate); err == nil {
			dates = fmt.Sprintf("%d dates", int(b.Sub(a).Hours()/24)+1)
		}
	}
	matched := ""
	if o.Matched != o.Rows {
		matched = ", " + number.Count(o.Matched) + " matched"
	}
	return fmt.Sprintf("staged %d features onto %s rows (%s%s) into %s",
		len(o.FeatureColumns), number.Count(o.Rows), dates, matched, o.StagingTable)
}

func (l *Lake) stageType() nodetype.Type {
	return nodetype.New(dags.NodeType{
		Name: "stage_features",
		Doc:  "Stage 1 of a feature backfill: join feature columns onto the training table's keys for a date range into a staging table (same partitioning, replaced on rerun).",
		Check: func(with map[string]any) error {
			if a, ok := with["alignment"].(string); ok && !dags.HasRef(a) {
				if _, err := backfill.ParseAlignment(a); err != nil {
					return err
				}
			}
			return CheckDates(with)
		},
	}, l.Stage)
}

// Stage runs a stage_features node.
func (l *Lake) Stage(ctx context.Context, in nodetype.Input, w StageWith) (StageOutputs, error) {
	cat, err := l.Open(ctx)
	if err != nil {
		return StageOutputs{}, err
	}
	res, err := features.Stage(ctx, cat, w.spec(), l.log(in))
	if err != nil {
		return StageOutputs{}, Error(err)
	}
	out := StageOutputs{
		StagingTable: res.Staging, SnapshotID: res.SnapshotID, Rows: res.Rows, Matched: res.Matched,
		FeatureColumns: res.Features, Location: res.Location, StartDate: w.StartDate, EndDate: w.EndDate,
	}
	out.Summary = out.summary()
	return out, nil
}
