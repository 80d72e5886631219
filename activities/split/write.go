// Package split is the `split` node type: it checkpoints the run's date window
// of a training table, at a pinned snapshot, as a train/eval split, and
// checks each feature's coverage.
package split

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/retrain-ml/retrain/activities/internal/objects"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go/table"
	"github.com/parquet-go/parquet-go"

	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/dataset"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
)

// splitBatch is how many rows go to a dataset writer at once.
const splitBatch = 4096

// splitPlan is what a split reads and checks, from its checked inputs.
type splitPlan struct {
	with    With
	window  backfill.DateRange
	from    backfill.Day
	hasFrom bool
	limits  dataset.Limits
	join    *features.Join // staging tables joined as the rows are read; nil: none
	joined  []string       // the columns the join brings
}

// errSplitInput marks a split that cannot be made from this data;
// errSplitCoverage one whose features are missing from too many rows.
var (
	errSplitInput    = errors.New("cannot split")
	errSplitCoverage = errors.New("feature coverage check failed")
)

func (s *Splits) write(ctx context.Context, cw *checkpoint.Writer, tbl *table.Table, snap int64, schema dataset.Schema,
	p splitPlan, log *slog.Logger) (Record, error) {
	w := p.with
	// Only the run's window is ever read: the filter prunes files by their
	// partition and column bounds, and rows are checked once more below
	// (a scan filter is a pruning hint to some readers, and the window is
	// the contract).
	inWindow := table.WithRowFilter(lake.DateRange(schema.Date, int32(p.window.Start), int32(p.window.End)))

	// Pass 1: the dates, to know which are held out.
	dates, err := scanDates(ctx, tbl, snap, schema.Date, inWindow, p.window)
	if err != nil {
		return Record{}, err
	}
	if len(dates) == 0 {
		return Record{}, fmt.Errorf("%w: table %s has no rows in the run's window %s (snapshot %d)", errSplitInput, w.Table, p.window, snap)
	}
	eval, err := dataset.EvalDates(dates, w.EvalDays, int32(p.from), p.hasFrom)
	if err != nil {
		return Record{}, fmt.Errorf("%w: table %s, window %s: %v", errSplitInput, w.Table, p.window, err)
	}

	pq := parquet.SchemaOf(reflect.New(schema.RowType()).Interface())
	opts := checkpoint.Options{MaxFileRows: w.MaxFileRows}
	train, err := checkpoint.CreateRows(cw, TrainDataset, pq, opts)
	if err != nil {
		return Record{}, err
	}
	held, err := checkpoint.CreateRows(cw, EvalDataset, pq, opts)
	if err != nil {
		return Record{}, err
	}

	// Pass 2: the rows.
	recs, joinStats, err := readRows(ctx, tbl, snap, schema, inWindow, p)
	if err != nil {
		return Record{}, fmt.Errorf("scan %s: %w", w.Table, err)
	}
	conv := dataset.NewConverter(schema)
	trainCov, evalCov := dataset.NewCoverage(schema), dataset.NewCoverage(schema)
	trainDays, evalDays := map[int32]bool{}, map[int32]bool{}
	var trainBuf, evalBuf []any
	flush := func(d *checkpoint.RowWriter, buf *[]any, force bool) error {
		if len(*buf) == 0 || !force && len(*buf) < splitBatch {
			return nil
		}
		_, err := d.Write(*buf)
		*buf = (*buf)[:0]
		return err
	}
	for rec, err := range recs {
		if err != nil {
			return Record{}, fmt.Errorf("scan %s: %w", w.Table, err)
		}
		converted, err := conv.Rows(rec)
		rec.Release()
		if err != nil {
			return Record{}, fmt.Errorf("%w: %v", errSplitInput, err)
		}
		for _, r := range converted {
			switch {
			case !p.window.Contains(backfill.Day(r.Date)):
				continue
			case eval[r.Date]:
				evalBuf = append(evalBuf, r.Value)
				evalCov.Add(r)
				evalDays[r.Date] = true
			default:
				trainBuf = append(trainBuf, r.Value)
				trainCov.Add(r)
				trainDays[r.Date] = true
			}
		}
		if err := flush(train, &trainBuf, false); err != nil {
			return Record{}, err
		}
		if err := flush(held, &evalBuf, false); err != nil {
			return Record{}, err
		}
	}
	if err := flush(train, &trainBuf, true); err != nil {
		return Record{}, err
	}
	if err := flush(held, &evalBuf, true); err != nil {
		return Record{}, err
	}
	trainRef, err := train.Close()
	if err != nil {
		return Record{}, err
	}
	if _, err := held.Close(); err != nil {
		return Record{}, err
	}
	trainRows, evalRows := trainCov.Rows(), evalCov.Rows()
	if trainRows == 0 || evalRows == 0 {
		return Record{}, fmt.Errorf("%w: table %s, window %s: %d training and %d held-out rows with a label", errSplitInput, w.Table, p.window, trainRows, evalRows)
	}
	out := Record{
		URI:        objects.KeyURI(s.Store, trainRef.Manifest),
		Manifest:   trainRef.Manifest,
		TrainRows:  trainRows,
		EvalRows:   evalRows,
		Window:     dataset.Window{Start: p.window.Start.String(), End: p.window.End.String()},
		TrainDates: dayStrings(trainDays),
		EvalDates:  dayStrings(evalDays),
		Coverage:   dataset.Report(schema, trainCov, evalCov, p.limits),
		SnapshotID: strconv.FormatInt(snap, 10),
		Schema:     schema,
	}
	if p.join != nil {
		out.Joined = p.join.Columns()
		out.JoinSummary = p.join.Summary()
		log.Info("split joined staging tables", "how", out.JoinSummary, "partitions", joinStats.Partitions,
			"staging_reads", joinStats.StagingReads, "matched", joinStats.Matched, "rows", joinStats.Rows, "max_staging_rows", joinStats.MaxStagingRows)
	}
	log.Info("split written", "window", out.Window.String(), "train", trainRows, "eval", evalRows,
		"train_dates", out.TrainDates, "eval_dates", out.EvalDates, "coverage", out.Coverage.Summary())
	trainWin := dataset.Window{Start: out.TrainDates[0], End: out.TrainDates[len(out.TrainDates)-1]}
	evalWin := dataset.Window{Start: out.EvalDates[0], End: out.EvalDates[len(out.EvalDates)-1]}
	if v := out.Coverage.Violations(trainRows, evalRows, trainWin, evalWin); len(v) > 0 {
		// The checkpoint is not committed, so a retry or rerun with a
		// fixed table or limit starts afresh.
		return Record{}, fmt.Errorf("%w on %s: %s", errSplitCoverage, w.Table, strings.Join(v, "; "))
	}
	return out, nil
}

// readRows reads the window's rows of the columns schema needs: from the
// training table alone, or with the staging tables joined on the fly.
func readRows(ctx context.Context, tbl *table.Table, snap int64, schema dataset.Schema, inWindow table.ScanOption, p splitPlan) (iter.Seq2[arrow.RecordBatch, error], *features.JoinStats, error) {
	stats := &features.JoinStats{}
	if p.join == nil {
		_, recs, err := lake.Scan(ctx, tbl, table.WithSnapshotID(snap), inWindow, table.WithSelectedFields(schema.TableColumns()...)).ToArrowRecords(ctx)
		return recs, stats, err
	}
	var own []string
	for _, c := range schema.TableColumns() {
		if !slices.Contains(p.joined, c) {
			own = append(own, c)
		}
	}
	return p.join.Read(ctx, own, joinWorkers(), stats), stats, nil
}

// dayStrings formats a set of day numbers as sorted YYYY-MM-DD strings.
func dayStrings(days map[int32]bool) []string {
	out := make([]string, 0, len(days))
	for _, d := range slices.Sorted(maps.Keys(days)) {
		out = append(out, backfill.Day(d).String())
	}
	return out
}

// scanDates reads the dates of a snapshot inside the window.
func scanDates(ctx context.Context, tbl *table.Table, snap int64, col string, filter table.ScanOption, window backfill.DateRange) ([]int32, error) {
	_, recs, err := lake.Scan(ctx, tbl, table.WithSnapshotID(snap), filter, table.WithSelectedFields(col)).ToArrowRecords(ctx)
	if err != nil {
		return nil, err
	}
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
	out := make([]int32, 0, len(seen))
	for d := range seen {
		out = append(out, d)
	}
	return out, nil
}
