// Package split is the `split` node type: it checkpoints the run's date window
// of a training table, at a pinned snapshot, as a train/eval split, and
// checks each feature's coverage.
package split

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/retrain-ml/retrain/activities/internal/objects"

	"github.com/parquet-go/parquet-go"

	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/dataset"
	"github.com/retrain-ml/retrain/internal/features"
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

func (s *Splits) write(ctx context.Context, cw *checkpoint.Writer, src rowSource, schema dataset.Schema,
	p splitPlan, log *slog.Logger) (Record, error) {
	w := p.with
	// Pass 1: the dates, to know which are held out. Only the run's
	// window is ever read: sources prune by it, and rows are checked once
	// more below (pruning is a hint to some readers, and the window is the
	// contract).
	dates, err := src.dates(ctx, schema.Date, p.window)
	if err != nil {
		return Record{}, err
	}
	if len(dates) == 0 {
		msg := fmt.Sprintf("%s has no rows in the run's window %s", src.name(), p.window)
		if t, ok := src.(*tableSource); ok {
			msg += fmt.Sprintf(" (snapshot %d)", t.snap)
		}
		return Record{}, fmt.Errorf("%w: %s", errSplitInput, msg)
	}
	eval, err := dataset.EvalDates(dates, w.EvalDays, int32(p.from), p.hasFrom)
	if err != nil {
		return Record{}, fmt.Errorf("%w: %s, window %s: %v", errSplitInput, src.name(), p.window, err)
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
	recs, joinStats, err := src.rows(ctx, schema, p)
	if err != nil {
		return Record{}, fmt.Errorf("scan %s: %w", src.name(), err)
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
			return Record{}, fmt.Errorf("scan %s: %w", src.name(), err)
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
		return Record{}, fmt.Errorf("%w: %s, window %s: %d training and %d held-out rows with a label", errSplitInput, src.name(), p.window, trainRows, evalRows)
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
		Schema:     schema,
	}
	src.record(&out)
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
		return Record{}, fmt.Errorf("%w on %s: %s", errSplitCoverage, src.name(), strings.Join(v, "; "))
	}
	return out, nil
}

// dayStrings formats a set of day numbers as sorted YYYY-MM-DD strings.
func dayStrings(days map[int32]bool) []string {
	out := make([]string, 0, len(days))
	for _, d := range slices.Sorted(maps.Keys(days)) {
		out = append(out, backfill.Day(d).String())
	}
	return out
}
