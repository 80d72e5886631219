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

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/parquet-go/parquet-go"

	"github.com/retrain-ml/retrain/activities/internal/objects"
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
	// buckets are the training table's buckets to read, of its bucket
	// partition on bucketCol (one bucket group of a split that fans
	// out); nil: all.
	buckets   []int
	bucketCol string
}

// errSplitInput marks a split that cannot be made from this data;
// errSplitCoverage one whose features are missing from too many rows.
var (
	errSplitInput    = errors.New("cannot split")
	errSplitCoverage = errors.New("feature coverage check failed")
)

// heldOut reads the dates with rows in the window (pass 1) and picks the
// held-out ones.
func heldOut(ctx context.Context, src rowSource, schema dataset.Schema, p splitPlan) (map[int32]bool, error) {
	// Only the run's window is ever read: sources prune by it, and rows
	// are checked once more as they are written (pruning is a hint to
	// some readers, and the window is the contract).
	dates, err := src.dates(ctx, schema.Date, p.window)
	if err != nil {
		return nil, err
	}
	if len(dates) == 0 {
		msg := fmt.Sprintf("%s has no rows in the run's window %s", src.name(), p.window)
		if t, ok := src.(*tableSource); ok {
			msg += fmt.Sprintf(" (snapshot %d)", t.snap)
		}
		return nil, fmt.Errorf("%w: %s", errSplitInput, msg)
	}
	eval, err := dataset.EvalDates(dates, p.with.EvalDays, int32(p.from), p.hasFrom)
	if err != nil {
		return nil, fmt.Errorf("%w: %s, window %s: %v", errSplitInput, src.name(), p.window, err)
	}
	return eval, nil
}

// write makes the whole split in one pass over the source, into cw: the
// split of files, and of a table in one process.
func (s *Splits) write(ctx context.Context, cw *checkpoint.Writer, src rowSource, schema dataset.Schema,
	p splitPlan, log *slog.Logger) (Record, error) {
	eval, err := heldOut(ctx, src, schema, p)
	if err != nil {
		return Record{}, err
	}
	sp, joinStats, err := splitRows(ctx, cw, src, schema, p, eval)
	if err != nil {
		return Record{}, err
	}
	if p.join != nil {
		logJoin(log, p.join, joinStats)
	}
	return s.finish(log, src.name(), cw.Ref(TrainDataset).Manifest, schema, p, &sp.tally, src.record)
}

// splitRows reads the rows p selects of src into a splitter writing cw
// (eval the held-out dates), and closes it: the pass a whole split and a
// bucket group share.
func splitRows(ctx context.Context, cw *checkpoint.Writer, src rowSource, schema dataset.Schema, p splitPlan, eval map[int32]bool) (*splitter, *features.JoinStats, error) {
	sp, err := newSplitter(cw, schema, p.window, eval, p.with.MaxFileRows)
	if err != nil {
		return nil, nil, err
	}
	recs, stats, err := src.rows(ctx, schema, p)
	if err != nil {
		return nil, nil, fmt.Errorf("scan %s: %w", src.name(), err)
	}
	for rec, err := range recs {
		if err != nil {
			return nil, nil, fmt.Errorf("scan %s: %w", src.name(), err)
		}
		if err := sp.add(rec); err != nil {
			return nil, nil, err
		}
	}
	if err := sp.close(); err != nil {
		return nil, nil, err
	}
	return sp, stats, nil
}

// logJoin logs how a split joined its staging tables.
func logJoin(log *slog.Logger, join *features.Join, st *features.JoinStats) {
	log.Info("split joined staging tables", "how", join.Summary(), "partitions", st.Partitions,
		"staging_reads", st.StagingReads, "matched", st.Matched, "rows", st.Rows, "max_staging_rows", st.MaxStagingRows)
}

// tally is what a split counted of the rows it wrote: each side's
// coverage and dates.
type tally struct {
	train, eval         *dataset.Coverage
	trainDays, evalDays map[int32]bool
}

func newTally(schema dataset.Schema) tally {
	return tally{train: dataset.NewCoverage(schema), eval: dataset.NewCoverage(schema), trainDays: map[int32]bool{}, evalDays: map[int32]bool{}}
}

// finish makes the split's record from what it wrote, and checks it: rows
// on both sides, and every feature's coverage. record notes what the
// source read. Failing here leaves nothing committed, so a retry or a
// rerun with a fixed table or limit starts afresh.
func (s *Splits) finish(log *slog.Logger, name, manifest string, schema dataset.Schema, p splitPlan, t *tally, record func(*Record)) (Record, error) {
	trainRows, evalRows := t.train.Rows(), t.eval.Rows()
	if trainRows == 0 || evalRows == 0 {
		return Record{}, fmt.Errorf("%w: %s, window %s: %d training and %d held-out rows with a label", errSplitInput, name, p.window, trainRows, evalRows)
	}
	out := Record{
		URI:        objects.KeyURI(s.Store, manifest),
		Manifest:   manifest,
		TrainRows:  trainRows,
		EvalRows:   evalRows,
		Window:     dataset.Window{Start: p.window.Start.String(), End: p.window.End.String()},
		TrainDates: dayStrings(t.trainDays),
		EvalDates:  dayStrings(t.evalDays),
		Coverage:   dataset.Report(schema, t.train, t.eval, p.limits),
		Schema:     schema,
	}
	record(&out)
	if p.join != nil {
		out.Joined = p.join.Columns()
		out.JoinSummary = p.join.Summary()
	}
	log.Info("split written", "window", out.Window.String(), "train", trainRows, "eval", evalRows,
		"train_dates", out.TrainDates, "eval_dates", out.EvalDates, "coverage", out.Coverage.Summary())
	trainWin := dataset.Window{Start: out.TrainDates[0], End: out.TrainDates[len(out.TrainDates)-1]}
	evalWin := dataset.Window{Start: out.EvalDates[0], End: out.EvalDates[len(out.EvalDates)-1]}
	if v := out.Coverage.Violations(trainRows, evalRows, trainWin, evalWin); len(v) > 0 {
		return Record{}, fmt.Errorf("%w on %s: %s", errSplitCoverage, name, strings.Join(v, "; "))
	}
	return out, nil
}

// splitter writes a source's rows into the train and eval datasets of a
// checkpoint writer (the whole split, or one bucket group's part of it),
// counting them as it goes.
type splitter struct {
	conv              *dataset.Converter
	window            backfill.DateRange
	eval              map[int32]bool
	train, held       *checkpoint.RowWriter
	trainBuf, evalBuf []any
	tally
}

func newSplitter(cw *checkpoint.Writer, schema dataset.Schema, window backfill.DateRange, eval map[int32]bool, maxFileRows int64) (*splitter, error) {
	pq := parquet.SchemaOf(reflect.New(schema.RowType()).Interface())
	opts := checkpoint.Options{MaxFileRows: maxFileRows}
	train, err := checkpoint.CreateRows(cw, TrainDataset, pq, opts)
	if err != nil {
		return nil, err
	}
	held, err := checkpoint.CreateRows(cw, EvalDataset, pq, opts)
	if err != nil {
		return nil, err
	}
	return &splitter{conv: dataset.NewConverter(schema), window: window, eval: eval, train: train, held: held, tally: newTally(schema)}, nil
}

// add writes one batch of rows (and releases it): rows outside the window
// are dropped, held-out dates go to eval, the others to train.
func (sp *splitter) add(rec arrow.RecordBatch) error {
	converted, err := sp.conv.Rows(rec)
	rec.Release()
	if err != nil {
		return fmt.Errorf("%w: %v", errSplitInput, err)
	}
	for _, r := range converted {
		switch {
		case !sp.window.Contains(backfill.Day(r.Date)):
			continue
		case sp.eval[r.Date]:
			sp.evalBuf = append(sp.evalBuf, r.Value)
			sp.tally.eval.Add(r)
			sp.evalDays[r.Date] = true
		default:
			sp.trainBuf = append(sp.trainBuf, r.Value)
			sp.tally.train.Add(r)
			sp.trainDays[r.Date] = true
		}
	}
	if err := flush(sp.train, &sp.trainBuf, false); err != nil {
		return err
	}
	return flush(sp.held, &sp.evalBuf, false)
}

// close writes what is buffered and closes both datasets.
func (sp *splitter) close() error {
	if err := flush(sp.train, &sp.trainBuf, true); err != nil {
		return err
	}
	if err := flush(sp.held, &sp.evalBuf, true); err != nil {
		return err
	}
	if _, err := sp.train.Close(); err != nil {
		return err
	}
	_, err := sp.held.Close()
	return err
}

// flush writes buf once it holds a batch, or whatever it holds if force.
func flush(d *checkpoint.RowWriter, buf *[]any, force bool) error {
	if len(*buf) == 0 || !force && len(*buf) < splitBatch {
		return nil
	}
	_, err := d.Write(*buf)
	*buf = (*buf)[:0]
	return err
}

// dayStrings formats a set of day numbers as sorted YYYY-MM-DD strings.
func dayStrings(days map[int32]bool) []string {
	out := make([]string, 0, len(days))
	for _, d := range slices.Sorted(maps.Keys(days)) {
		out = append(out, backfill.Day(d).String())
	}
	return out
}
