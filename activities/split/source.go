package split

import (
	"context"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/dataset"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
)

// rowSource is where a split's rows come from: an Iceberg table at a
// snapshot or plain Parquet files. The split's writing path (write) is
// the same for both, so train, evaluate and the gate see the same kind of
// split whatever the source.
type rowSource interface {
	// name says the source in messages: "table ml.training".
	name() string
	// dates reads the dates with rows inside the window (pass 1).
	dates(ctx context.Context, col string, window backfill.DateRange) ([]int32, error)
	// rows reads the window's rows of the columns schema needs (pass 2).
	rows(ctx context.Context, schema dataset.Schema, p splitPlan) (iter.Seq2[arrow.RecordBatch, error], *features.JoinStats, error)
	// record notes in the split's record what was read.
	record(*Record)
}

// tableSource is a table at a pinned snapshot.
type tableSource struct {
	tbl    *table.Table
	table  string
	snap   int64
	schema dataset.Schema
	join   *features.Join // staging tables joined; nil: none
	joined []string
}

func (t *tableSource) name() string { return "table " + t.table }

func (t *tableSource) record(r *Record) { r.SnapshotID = strconv.FormatInt(t.snap, 10) }

// inWindow prunes files by their partition and column bounds.
func inWindow(col string, window backfill.DateRange) table.ScanOption {
	return table.WithRowFilter(lake.DateRange(col, int32(window.Start), int32(window.End)))
}

func (t *tableSource) dates(ctx context.Context, col string, window backfill.DateRange) ([]int32, error) {
	return scanDates(ctx, t.tbl, t.snap, col, inWindow(col, window), window)
}

func (t *tableSource) rows(ctx context.Context, schema dataset.Schema, p splitPlan) (iter.Seq2[arrow.RecordBatch, error], *features.JoinStats, error) {
	return readRows(ctx, t.tbl, t.snap, schema, inWindow(schema.Date, p.window), p)
}

func (s *filesSource) name() string {
	if len(s.read.Patterns) == 1 {
		return "files " + s.read.Patterns[0]
	}
	return "files " + strconv.Itoa(len(s.read.Patterns)) + " patterns"
}

func (s *filesSource) record(r *Record) {
	read := *s.read
	r.Files = &read
	r.Timezone = s.loc.String()
	if s.join != nil {
		r.Joined, r.JoinSummary = s.join.columns(), s.join.summary()
		for _, side := range s.join.sides {
			sr := *side.src.read
			read.Joined = append(read.Joined, &sr)
		}
	}
}

func (s *filesSource) dates(ctx context.Context, col string, window backfill.DateRange) ([]int32, error) {
	return windowDates(s.records(ctx, []string{col}), col, window)
}

func (s *filesSource) rows(ctx context.Context, schema dataset.Schema, _ splitPlan) (iter.Seq2[arrow.RecordBatch, error], *features.JoinStats, error) {
	if s.join == nil {
		return s.records(ctx, schema.TableColumns()), &features.JoinStats{}, nil
	}
	joined := map[string]bool{}
	for _, f := range s.join.fields() {
		joined[f.Name] = true
	}
	var own []string
	for _, c := range append(schema.TableColumns(), s.join.trainColumns()...) {
		if !joined[c] && !slices.Contains(own, c) {
			own = append(own, c)
		}
	}
	return func(yield func(arrow.RecordBatch, error) bool) {
		defer s.join.close()
		for raw, err := range s.rawRecords(ctx, own) {
			if err != nil {
				yield(nil, err)
				return
			}
			rec, err := s.joinBatch(ctx, raw)
			raw.Release()
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(rec, nil) {
				return
			}
		}
	}, &features.JoinStats{}, nil
}

// joinBatch is a raw training batch with the joined columns added and
// its date column as days.
func (s *filesSource) joinBatch(ctx context.Context, raw arrow.RecordBatch) (arrow.RecordBatch, error) {
	days, err := s.days(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errSplitInput, s.current, err)
	}
	defer days.Release()
	joined, err := s.join.apply(ctx, raw, days.(*array.Date32))
	if err != nil {
		return nil, err
	}
	defer joined.Release()
	return s.normalize(joined, days)
}

// readRows reads the window's rows of the columns schema needs: from the
// training table alone, or with the staging tables joined on the fly.
func readRows(ctx context.Context, tbl *table.Table, snap int64, schema dataset.Schema, inWindow table.ScanOption, p splitPlan) (iter.Seq2[arrow.RecordBatch, error], *features.JoinStats, error) {
	stats := &features.JoinStats{}
	if p.join == nil {
		scan := lake.Scan(ctx, tbl, table.WithSnapshotID(snap), inWindow, table.WithSelectedFields(schema.TableColumns()...))
		if p.buckets == nil {
			_, recs, err := scan.ToArrowRecords(ctx)
			return recs, stats, err
		}
		tasks, err := bucketTasks(ctx, tbl, scan, p.bucketCol, p.buckets)
		if err != nil {
			return nil, nil, err
		}
		_, recs, err := scan.ReadTasks(ctx, tasks)
		return recs, stats, err
	}
	var own []string
	for _, c := range schema.TableColumns() {
		if !slices.Contains(p.joined, c) {
			own = append(own, c)
		}
	}
	return p.join.ReadBuckets(ctx, own, p.buckets, joinWorkers(), stats), stats, nil
}

// bucketTasks plans the files of scan in the given buckets of the
// table's bucket partition on column col.
func bucketTasks(ctx context.Context, tbl *table.Table, scan *table.Scan, col string, buckets []int) ([]table.FileScanTask, error) {
	parts, err := lake.PlanPartitions(ctx, tbl, scan)
	if err != nil {
		return nil, err
	}
	var tasks []table.FileScanTask
	for _, p := range parts {
		b, ok := p.Values[col]
		if !ok {
			return nil, fmt.Errorf("partition %s has no value of bucket column %s", p.Key, col)
		}
		if slices.Contains(buckets, int(b)) {
			tasks = append(tasks, p.Tasks...)
		}
	}
	return tasks, nil
}

// scanDates reads the dates of a snapshot inside the window.
func scanDates(ctx context.Context, tbl *table.Table, snap int64, col string, filter table.ScanOption, window backfill.DateRange) ([]int32, error) {
	_, recs, err := lake.Scan(ctx, tbl, table.WithSnapshotID(snap), filter, table.WithSelectedFields(col)).ToArrowRecords(ctx)
	if err != nil {
		return nil, err
	}
	return windowDates(recs, col, window)
}

// windowDates is the sorted set of the dates in column col of recs that
// lie inside the window: what a table or files source holds of the run's
// window (rows outside it, which pruning may let through, do not count).
func windowDates(recs iter.Seq2[arrow.RecordBatch, error], col string, window backfill.DateRange) ([]int32, error) {
	seen := map[int32]bool{}
	for rec, err := range recs {
		if err != nil {
			return nil, err
		}
		ds, err := dataset.Dates(rec, col)
		rec.Release()
		if err != nil {
			return nil, err
		}
		for _, d := range ds {
			if window.Contains(backfill.Day(d)) {
				seen[d] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(seen)), nil
}
