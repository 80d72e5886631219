package features

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
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

// stagingSchema is the training table's key and partition columns (as in
// the training table) followed by the staged features (optional).
func (j *stageJob) stagingSchema() (*iceberg.Schema, error) {
	var fields []iceberg.NestedField
	id := 0
	next := func() int { id++; return id }
	var identifiers []int
	for _, name := range j.plan.CarryColumns {
		f, _ := j.training.Schema().FindFieldByName(name)
		nf := iceberg.NestedField{ID: next(), Name: name, Type: f.Type, Required: f.Required, Doc: f.Doc}
		if slices.Contains(j.plan.PrimaryKey, name) {
			identifiers = append(identifiers, nf.ID)
		}
		fields = append(fields, nf)
	}
	for i, src := range j.plan.FeatureSource {
		f, _ := j.feature.Schema().FindFieldByName(src)
		typ, err := freshIDs(f.Type, next)
		if err != nil {
			return nil, badInput("feature column %s: %v", src, err)
		}
		fields = append(fields, iceberg.NestedField{ID: next(), Name: j.plan.FeatureNames[i], Type: typ, Doc: f.Doc})
	}
	return iceberg.NewSchemaWithIdentifiers(0, identifiers, fields...), nil
}

// freshIDs copies a type, giving nested fields new ids.
func freshIDs(t iceberg.Type, next func() int) (iceberg.Type, error) {
	switch t := t.(type) {
	case *iceberg.ListType:
		el, err := freshIDs(t.Element, next)
		if err != nil {
			return nil, err
		}
		return &iceberg.ListType{ElementID: next(), Element: el, ElementRequired: t.ElementRequired}, nil
	case *iceberg.MapType:
		k, err := freshIDs(t.KeyType, next)
		if err != nil {
			return nil, err
		}
		v, err := freshIDs(t.ValueType, next)
		if err != nil {
			return nil, err
		}
		return &iceberg.MapType{KeyID: next(), KeyType: k, ValueID: next(), ValueType: v, ValueRequired: t.ValueRequired}, nil
	case *iceberg.StructType:
		out := &iceberg.StructType{}
		for _, f := range t.FieldList {
			ft, err := freshIDs(f.Type, next)
			if err != nil {
				return nil, err
			}
			out.FieldList = append(out.FieldList, iceberg.NestedField{ID: next(), Name: f.Name, Type: ft, Required: f.Required})
		}
		return out, nil
	default:
		return t, nil
	}
}

// stagingSpec is the training table's partition spec over the staging
// schema's columns.
func (j *stageJob) stagingSpec() (iceberg.PartitionSpec, error) {
	var fields []iceberg.PartitionField
	tspec := j.training.Spec()
	for _, f := range tspec.Fields() {
		src, _ := j.training.Schema().FindColumnName(f.SourceID())
		sf, ok := j.schema.FindFieldByName(src)
		if !ok {
			return iceberg.PartitionSpec{}, fmt.Errorf("partition source %s missing from staging schema", src)
		}
		fields = append(fields, iceberg.PartitionField{SourceIDs: []int{sf.ID}, FieldID: f.FieldID, Name: f.Name, Transform: f.Transform})
	}
	return iceberg.NewPartitionSpec(fields...), nil
}

// stagingTable creates the staging table, or reuses it if it has the
// shape this job writes. A staging table of another shape (an earlier job
// staged other features into it) is dropped and recreated: a staging
// table belongs to the job that names it.
func (j *stageJob) stagingTable(ctx context.Context, cat *lake.Catalog, log *slog.Logger) (*table.Table, error) {
	spec, err := j.stagingSpec()
	if err != nil {
		return nil, err
	}
	props := iceberg.Properties{
		PropStagingOf:      j.spec.Training,
		PropStagingFrom:    j.spec.Feature,
		PropStagingAlign:   string(j.align),
		PropStagingKeys:    strings.Join(j.plan.PrimaryKey, ","),
		PropStagingFeature: strings.Join(j.plan.FeatureNames, ","),
	}
	existing, err := cat.Load(ctx, j.spec.Staging)
	switch {
	case err == nil:
		if sameShape(existing.Schema(), j.schema) && sameSpecOf(existing, j.training) && existing.Properties()[PropStagingOf] == j.spec.Training {
			return existing, nil
		}
		log.Info("stage: staging table has another shape; recreating it", "table", j.spec.Staging)
		if err := cat.DropTable(ctx, j.spec.Staging); err != nil {
			return nil, err
		}
	case !errors.Is(err, lake.ErrNoSuchTable):
		return nil, err
	}
	tbl, err := cat.CreateTable(ctx, j.spec.Staging, j.schema, lake.TableSpec{Partition: &spec, Properties: props})
	if err != nil {
		// Another run of this job may have created it concurrently.
		if again, lerr := cat.Load(ctx, j.spec.Staging); lerr == nil && sameShape(again.Schema(), j.schema) {
			return again, nil
		}
		return nil, err
	}
	return tbl, nil
}

func sameShape(a, b *iceberg.Schema) bool {
	af, bf := a.Fields(), b.Fields()
	if len(af) != len(bf) {
		return false
	}
	for i := range af {
		if af[i].Name != bf[i].Name || af[i].Type.String() != bf[i].Type.String() || af[i].Required != bf[i].Required {
			return false
		}
	}
	return true
}

func sameSpecOf(a, b *table.Table) bool {
	as, _, err1 := specOf(a)
	bs, _, err2 := specOf(b)
	return err1 == nil && err2 == nil && slices.Equal(as, bs)
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

// rows yields the staging rows day by day, partition by partition: each
// training partition's rows with their key and partition columns and the
// features the alignment joins. The staging table is partitioned as the
// training table, so a training partition's rows are one staging
// partition and go to the writer as they are.
func (j *stageJob) rows(ctx context.Context, mem memory.Allocator, out *arrow.Schema, res *StageResult, log *slog.Logger) iter.Seq2[lake.PartitionBatch, error] {
	return func(yield func(lake.PartitionBatch, error) bool) {
		featCols := append(slices.Clone(j.spec.Keys), j.plan.FeatureSource...)
		timeCol := j.spec.DateColumn
		if !j.align.UsesDate() {
			timeCol = j.spec.FeatureTimeColumn
		}
		featCols = append(featCols, timeCol)
		trainTime := j.spec.DateColumn
		if !j.align.UsesDate() {
			trainTime = j.spec.EventTimeColumn
		}
		for d := j.rng.Start; d <= j.rng.End; d++ {
			if err := ctx.Err(); err != nil {
				yield(lake.PartitionBatch{}, err)
				return
			}
			ix, feats, err := j.featureIndex(ctx, mem, d, featCols)
			if err != nil {
				yield(lake.PartitionBatch{}, fmt.Errorf("feature rows for %s: %w", d, err))
				return
			}
			opts := []table.ScanOption{
				table.WithRowFilter(iceberg.EqualTo(iceberg.Reference(j.spec.DateColumn), iceberg.Date(d))),
				table.WithSelectedFields(j.plan.ReadColumns...),
			}
			parts, err := lake.PlanPartitions(ctx, j.training, j.training.Scan(opts...))
			if err != nil {
				release(feats)
				yield(lake.PartitionBatch{}, fmt.Errorf("scan %s for %s: %w", j.spec.Training, d, err))
				return
			}
			scan := j.training.Scan(append(opts, table.WithArrowBatchSize(batchRows(parts)))...)
			for _, p := range parts {
				if !j.joinPartition(ctx, mem, out, scan, p, ix, feats, trainTime, res, yield) {
					release(feats)
					return
				}
			}
			release(feats)
			log.Debug("stage: day joined", "day", d, "rows", res.Rows)
		}
	}
}

// joinPartition joins one training partition's rows and yields them; it
// returns false when the caller must stop (an error was yielded, or the
// consumer stopped).
func (j *stageJob) joinPartition(ctx context.Context, mem memory.Allocator, out *arrow.Schema, scan *table.Scan, p lake.Partition, ix *backfill.FeatureIndex, feats []arrow.Array, trainTime string, res *StageResult, yield func(lake.PartitionBatch, error) bool) bool {
	_, recs, err := scan.ReadTasks(ctx, p.Tasks)
	if err != nil {
		yield(lake.PartitionBatch{}, fmt.Errorf("scan %s partition %s: %w", j.spec.Training, p.Key, err))
		return false
	}
	for rec, err := range recs {
		if err != nil {
			yield(lake.PartitionBatch{}, fmt.Errorf("scan %s partition %s: %w", j.spec.Training, p.Key, err))
			return false
		}
		joined, err := j.join(ctx, mem, out, rec, ix, feats, trainTime, res)
		rec.Release()
		if err != nil {
			yield(lake.PartitionBatch{}, err)
			return false
		}
		if !yield(lake.PartitionBatch{Values: p.Values, Record: joined}, nil) {
			return false
		}
	}
	return true
}

// featureIndex reads the feature rows training rows of day d may join and
// indexes them. It returns nil arrays when there are none.
func (j *stageJob) featureIndex(ctx context.Context, mem memory.Allocator, d backfill.Day, cols []string) (*backfill.FeatureIndex, []arrow.Array, error) {
	w := j.align.Window(d, j.spec.LookbackDays)
	var filter iceberg.BooleanExpression
	if j.align.UsesDate() {
		filter = lake.DateRange(j.spec.DateColumn, int32(w.FromDay), int32(w.ToDay))
	} else {
		ref := iceberg.Reference(j.spec.FeatureTimeColumn)
		filter = iceberg.NewAnd(
			iceberg.GreaterThanEqual(ref, iceberg.Timestamp(w.FromMicros)),
			iceberg.LessThanEqual(ref, iceberg.Timestamp(w.ToMicros)))
	}
	if j.feature.CurrentSnapshot() == nil {
		return nil, nil, nil
	}
	arrs, n, err := readAll(ctx, mem, j.feature.Scan(table.WithRowFilter(filter), table.WithSelectedFields(cols...)), cols)
	if err != nil || n == 0 {
		release(arrs)
		return nil, nil, err
	}
	nk := len(j.spec.Keys)
	ix, err := backfill.NewFeatureIndex(j.align, j.spec.Keys, arrs[:nk], arrs[len(arrs)-1])
	if err != nil {
		release(arrs)
		return nil, nil, badInput("feature table %s: %v", j.spec.Feature, err)
	}
	return ix, arrs, nil
}

// join builds the staging record of one training batch.
func (j *stageJob) join(ctx context.Context, mem memory.Allocator, out *arrow.Schema, rec arrow.RecordBatch, ix *backfill.FeatureIndex, feats []arrow.Array, trainTime string, res *StageResult) (arrow.RecordBatch, error) {
	n := int(rec.NumRows())
	var taken []arrow.Array
	nk, nf := len(j.spec.Keys), len(j.plan.FeatureSource)
	if ix != nil {
		keys, err := columns(rec, j.spec.Keys)
		if err != nil {
			return nil, err
		}
		tcol, err := column(rec, trainTime)
		if err != nil {
			return nil, err
		}
		idx, err := ix.Match(keys, tcol)
		if err != nil {
			return nil, badInput("join %s to %s: %v", j.spec.Training, j.spec.Feature, err)
		}
		res.Matched += int64(backfill.Matched(idx))
		if taken, err = backfill.Take(ctx, mem, feats[nk:nk+nf], idx); err != nil {
			return nil, err
		}
	} else {
		for i := range nf {
			taken = append(taken, array.MakeArrayOfNull(mem, out.Field(len(j.plan.CarryColumns)+i).Type, n))
		}
	}
	defer release(taken)
	cols := make([]arrow.Array, 0, out.NumFields())
	defer func() { release(cols) }()
	for i, name := range j.plan.CarryColumns {
		c, err := column(rec, name)
		if err != nil {
			return nil, err
		}
		cc, err := conform(c, out.Field(i).Type)
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", name, err)
		}
		cols = append(cols, cc)
	}
	for i, t := range taken {
		f := out.Field(len(j.plan.CarryColumns) + i)
		cc, err := conform(t, f.Type)
		if err != nil {
			return nil, fmt.Errorf("feature %s: %w", f.Name, err)
		}
		cols = append(cols, cc)
	}
	res.Rows += int64(n)
	return array.NewRecordBatch(out, cols, int64(n)), nil
}
