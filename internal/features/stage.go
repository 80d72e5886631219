package features

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/lake"
)

// Table properties retrain sets on the tables it writes, so that later
// steps (stats, promotion) know what a staging table holds.
const (
	PropStagingOf      = "retrain.staging.training-table"
	PropStagingFrom    = "retrain.staging.feature-table"
	PropStagingAlign   = "retrain.staging.alignment"
	PropStagingKeys    = "retrain.staging.key-columns"
	PropStagingFeature = "retrain.staging.feature-columns"
	PropPromoted       = "retrain.promoted-columns"
	PropPromotionID    = "retrain.promotion-id" // snapshot summary property
)

// StageSpec is a stage-1 job: join feature columns of a feature table
// onto the rows of a training table, for a date range, under an
// alignment, into a staging table.
type StageSpec struct {
	Training          string   `json:"training_table"`
	Feature           string   `json:"feature_table"`
	Keys              []string `json:"keys"`
	StartDate         string   `json:"start_date"`
	EndDate           string   `json:"end_date"`
	Alignment         string   `json:"alignment"`
	Features          []string `json:"features,omitempty"`
	Prefix            string   `json:"prefix,omitempty"`
	Staging           string   `json:"staging_table,omitempty"`       // default: backfill.StagingTableName
	DateColumn        string   `json:"date_column,omitempty"`         // default "date"
	EventTimeColumn   string   `json:"event_time_column,omitempty"`   // default "event_ts"
	FeatureTimeColumn string   `json:"feature_time_column,omitempty"` // default "ts"
	LookbackDays      int      `json:"lookback_days,omitempty"`       // as_of only; default 7
}

func (s *StageSpec) defaults() {
	if s.DateColumn == "" {
		s.DateColumn = "date"
	}
	if s.EventTimeColumn == "" {
		s.EventTimeColumn = "event_ts"
	}
	if s.FeatureTimeColumn == "" {
		s.FeatureTimeColumn = "ts"
	}
	if s.LookbackDays <= 0 {
		s.LookbackDays = 7
	}
	if s.Staging == "" && s.Training != "" && s.Feature != "" {
		s.Staging = backfill.StagingTableName(s.Training, s.Feature)
	}
}

// StageResult reports a stage-1 job.
type StageResult struct {
	Staging    string        `json:"staging_table"`
	SnapshotID int64         `json:"snapshot_id,string"`
	Rows       int64         `json:"rows"`
	Matched    int64         `json:"matched"` // rows that joined a feature row
	Features   []string      `json:"feature_columns"`
	Files      int           `json:"files"`
	Location   string        `json:"location"`
	Elapsed    time.Duration `json:"elapsed"`
}

// stageJob is a checked stage-1 job.
type stageJob struct {
	spec     StageSpec
	rng      backfill.DateRange
	align    backfill.Alignment
	training *table.Table
	feature  *table.Table
	plan     backfill.StagePlan
	spec0    []backfill.SpecField
	schema   *iceberg.Schema // staging schema (fresh ids)
}

// loadInput loads a table a job reads; a missing one is bad input.
func loadInput(ctx context.Context, cat *lake.Catalog, role, name string) (*table.Table, error) {
	if name == "" {
		return nil, badInput("no %s given", role)
	}
	if _, err := lake.Ident(name); err != nil {
		return nil, badInput("%s: %v", role, err)
	}
	tbl, err := cat.Load(ctx, name)
	if errors.Is(err, lake.ErrNoSuchTable) {
		return nil, badInput("%s %s does not exist", role, name)
	}
	return tbl, err
}

// specOf describes a table's partition spec by source columns.
func specOf(tbl *table.Table) ([]backfill.SpecField, []lake.PartitionField, error) {
	fields, err := lake.SpecFields(tbl.Schema(), tbl.Spec())
	if err != nil {
		return nil, nil, err
	}
	out := make([]backfill.SpecField, len(fields))
	for i, f := range fields {
		out[i] = backfill.SpecField{Source: f.Source, Transform: f.Transform}
	}
	return out, fields, nil
}

// checkDateColumn checks that the training table (named name) has a date
// column col.
func checkDateColumn(training *table.Table, name, col string) error {
	f, ok := training.Schema().FindFieldByName(col)
	if !ok {
		return badInput("date column %s is not in training table %s", col, name)
	}
	if _, isDate := f.Type.(iceberg.DateType); !isDate {
		return badInput("date column %s of training table %s is %s, want date", col, name, f.Type)
	}
	return nil
}

// checkStage validates everything about a stage-1 job that can be checked
// without writing: dates, alignment, tables, columns and types.
func checkStage(ctx context.Context, cat *lake.Catalog, spec StageSpec) (*stageJob, error) {
	spec.defaults()
	j := &stageJob{spec: spec}
	var err error
	if j.rng, err = backfill.ParseDateRange(spec.StartDate, spec.EndDate); err != nil {
		return nil, badInput("%v", err)
	}
	if j.align, err = backfill.ParseAlignment(spec.Alignment); err != nil {
		return nil, badInput("%v", err)
	}
	if spec.Staging == spec.Training || spec.Staging == spec.Feature {
		return nil, badInput("staging table %s would overwrite an input table", spec.Staging)
	}
	if _, err := lake.Ident(spec.Staging); err != nil {
		return nil, badInput("staging table: %v", err)
	}
	if j.training, err = loadInput(ctx, cat, "training table", spec.Training); err != nil {
		return nil, err
	}
	if j.feature, err = loadInput(ctx, cat, "feature table", spec.Feature); err != nil {
		return nil, err
	}
	if j.spec0, _, err = specOf(j.training); err != nil {
		return nil, err
	}
	if err := checkDateColumn(j.training, spec.Training, spec.DateColumn); err != nil {
		return nil, err
	}
	check := backfill.StageCheck{
		Training: spec.Training, Feature: spec.Feature,
		TrainingSchema: j.training.Schema(), FeatureSchema: j.feature.Schema(), TrainingSpec: j.spec0,
		Keys: spec.Keys, Alignment: j.align,
		DateColumn: spec.DateColumn, EventTimeColumn: spec.EventTimeColumn, FeatureTimeColumn: spec.FeatureTimeColumn,
		Features: spec.Features, Prefix: spec.Prefix,
	}
	if j.plan, err = check.Check(); err != nil {
		return nil, badInput("%v", err)
	}
	if j.schema, err = j.stagingSchema(); err != nil {
		return nil, err
	}
	return j, nil
}

// Stage runs a stage-1 job. Every input is checked before anything is
// written. The staging table's partitions in the date range are then
// replaced as a whole (a dynamic partition overwrite), so a retry or a
// rerun replaces the job's own output and never duplicates a row. Jobs
// staging different feature tables write different staging tables and
// only read the training table, so they run concurrently without
// conflict.
func Stage(ctx context.Context, cat *lake.Catalog, spec StageSpec, log *slog.Logger) (StageResult, error) {
	if log == nil {
		log = slog.Default()
	}
	started := time.Now()
	j, err := checkStage(ctx, cat, spec)
	if err != nil {
		return StageResult{}, err
	}
	spec = j.spec
	staging, err := j.stagingTable(ctx, cat, log)
	if err != nil {
		return StageResult{}, err
	}
	outSchema, err := table.SchemaToArrowSchema(staging.Schema(), nil, true, false)
	if err != nil {
		return StageResult{}, err
	}
	res := StageResult{Staging: spec.Staging, Features: j.plan.FeatureNames, Location: staging.Location()}
	// One pool for the job's reads, joins and writes: a batch's buffers
	// serve the next batch once the writer has released it.
	mem := lake.NewPoolAllocator()
	wctx := compute.WithAllocator(ctx, mem)
	files, err := lake.WritePartitions(wctx, staging, outSchema, j.rows(wctx, mem, outSchema, &res, log))
	if err != nil {
		return res, err
	}
	res.Files = len(files)
	props := iceberg.Properties{
		"retrain.stage.range":     j.rng.String(),
		"retrain.stage.alignment": string(j.align),
		"retrain.stage.rows":      strconv.FormatInt(res.Rows, 10),
	}
	committed, err := cat.Update(ctx, spec.Staging, func(ctx context.Context, tbl *table.Table, tx *table.Transaction) error {
		// Replace the job's own output: every file of the date range,
		// as the table is now (a redo after a conflict sees the winner's).
		var del []iceberg.DataFile
		if tbl.CurrentSnapshot() != nil {
			var ferr error
			del, ferr = lake.FilesOf(ctx, tbl.Scan(table.WithRowFilter(lake.DateRange(spec.DateColumn, int32(j.rng.Start), int32(j.rng.End)))))
			if ferr != nil {
				return ferr
			}
		}
		return lake.ReplaceFiles(ctx, tx, del, files, props)
	})
	if err != nil {
		return res, err
	}
	if s := committed.CurrentSnapshot(); s != nil {
		res.SnapshotID = s.SnapshotID
	}
	res.Elapsed = time.Since(started)
	log.Info("stage: done", "staging", spec.Staging, "rows", res.Rows, "matched", res.Matched, "files", res.Files, "elapsed", res.Elapsed)
	return res, nil
}
