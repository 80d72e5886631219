package features

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/lake"
)

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
			parts, err := lake.PlanPartitions(ctx, j.training, lake.Scan(ctx, j.training, opts...))
			if err != nil {
				release(feats)
				yield(lake.PartitionBatch{}, fmt.Errorf("scan %s for %s: %w", j.spec.Training, d, err))
				return
			}
			scan := lake.Scan(ctx, j.training, append(opts, table.WithArrowBatchSize(batchRows(parts)))...)
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
	arrs, n, err := readAll(ctx, mem, lake.Scan(ctx, j.feature, table.WithRowFilter(filter), table.WithSelectedFields(cols...)), cols)
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
