package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strconv"

	"github.com/apache/iceberg-go/table"
	"github.com/parquet-go/parquet-go"

	"github.com/retrain-ml/retrain/backfill"
	"github.com/retrain-ml/retrain/checkpoint"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/dataset"
	"github.com/retrain-ml/retrain/lake"
	"github.com/retrain-ml/retrain/s3store"
)

// Datasets of a split checkpoint.
const (
	TrainDataset = "train"
	EvalDataset  = "eval"
)

// SplitType is the `split` node type.
var SplitType = dags.NodeType{
	Name: "split",
	Doc: "Checkpoint a training table (at a pinned snapshot) as a train/eval split: the last eval_days dates (or every date from eval_from) " +
		"are held out. Writes datasets train and eval as Parquet with one named column per feature, under checkpoints/<pipeline>/<run>/<node>/; " +
		"a retry or a rerun of the run with the same inputs reuses it. ${nodes.ID.outputs.uri} is what train and evaluate read.",
	Fields: []dags.Field{
		{Name: "table", Type: dags.FieldString, Required: true, Doc: "namespace.table of the training data"},
		{Name: "snapshot_id", Type: dags.FieldAny, Doc: "snapshot to read, e.g. ${nodes.promote.outputs.snapshot_id} (default: the current one)"},
		{Name: "dense", Type: dags.FieldStringList, Doc: "numeric feature columns"},
		{Name: "sparse", Type: dags.FieldStringList, Doc: "integer id (or list of ids) feature columns"},
		{Name: "label", Type: dags.FieldString, Doc: "label column, 0/1 (default label)"},
		{Name: "date_column", Type: dags.FieldString, Doc: "date column the split is by (default date)"},
		{Name: "request_id", Type: dags.FieldString, Doc: "key column, kept so results can be joined back (default request_id, when the table has it)"},
		{Name: "slice", Type: dags.FieldString, Doc: "column whose values key per-slice metrics in evaluate"},
		{Name: "eval_days", Type: dags.FieldInt, Doc: "hold out the last N dates (default 1)"},
		{Name: "eval_from", Type: dags.FieldString, Doc: "instead: hold out every date from this one, YYYY-MM-DD"},
		{Name: "max_file_rows", Type: dags.FieldInt, Doc: "start a new Parquet file after this many rows"},
	},
	Outputs: []string{"uri", "manifest", "train_rows", "eval_rows", "eval_dates", "snapshot_id", "schema", "fingerprint", "reused"},
	Check: func(with map[string]any) error {
		if n, ok := with["eval_days"].(float64); ok && n < 1 {
			return fmt.Errorf("eval_days must be at least 1, got %v", n)
		}
		_, days := with["eval_days"]
		from, hasFrom := with["eval_from"]
		if days && hasFrom {
			return errors.New("give eval_days or eval_from, not both")
		}
		if s, ok := from.(string); ok && !isRef(s) {
			if _, err := backfill.ParseDay(s); err != nil {
				return fmt.Errorf("eval_from: %w", err)
			}
		}
		dense, _ := with["dense"].([]any)
		sparse, _ := with["sparse"].([]any)
		if _, d := with["dense"]; !d || len(dense) == 0 {
			if _, s := with["sparse"]; !s || len(sparse) == 0 {
				return errors.New("give dense and/or sparse feature columns")
			}
		}
		if v, ok := with["snapshot_id"]; ok && !isRef(v) {
			if _, err := snapshotID(v); err != nil {
				return fmt.Errorf("snapshot_id: %w", err)
			}
		}
		return nil
	},
}

// Splits runs split nodes: they read the lake and write the object store.
type Splits struct {
	Catalog *lake.Lazy
	Store   *s3store.Store
	Logger  *slog.Logger
}

type splitWith struct {
	Table       string   `json:"table"`
	SnapshotID  any      `json:"snapshot_id"`
	Dense       []string `json:"dense"`
	Sparse      []string `json:"sparse"`
	Label       string   `json:"label"`
	DateColumn  string   `json:"date_column"`
	RequestID   string   `json:"request_id"`
	Slice       string   `json:"slice"`
	EvalDays    int      `json:"eval_days"`
	EvalFrom    string   `json:"eval_from"`
	MaxFileRows int64    `json:"max_file_rows"`
}

// splitOutputs are recorded in the checkpoint and returned on a hit.
type splitOutputs struct {
	URI         string         `json:"uri"`
	Manifest    string         `json:"manifest"`
	TrainRows   int64          `json:"train_rows"`
	EvalRows    int64          `json:"eval_rows"`
	EvalDates   []string       `json:"eval_dates"`
	SnapshotID  string         `json:"snapshot_id"`
	Schema      dataset.Schema `json:"schema"`
	Fingerprint string         `json:"fingerprint"`
}

// splitBatch is how many rows go to a dataset writer at once.
const splitBatch = 4096

// Run runs a split node.
func (s *Splits) Run(ctx context.Context, in NodeInput) (map[string]any, error) {
	var w splitWith
	if err := decodeWith(in.With, &w); err != nil {
		return nil, Permanent(ErrBadInput, "%v", err)
	}
	if w.Label == "" {
		w.Label = "label"
	}
	if w.DateColumn == "" {
		w.DateColumn = "date"
	}
	if w.RequestID == "" {
		w.RequestID = "request_id"
	}
	var (
		from    backfill.Day
		hasFrom bool
	)
	if w.EvalFrom != "" {
		d, err := backfill.ParseDay(w.EvalFrom)
		if err != nil {
			return nil, Permanent(ErrBadInput, "eval_from: %v", err)
		}
		from, hasFrom = d, true
	}
	if s.Store == nil {
		return nil, noStore()
	}
	lk := &Lake{Catalog: s.Catalog, Logger: s.Logger}
	cat, err := lk.open(ctx)
	if err != nil {
		return nil, err
	}
	tbl, err := cat.Load(ctx, w.Table)
	if err != nil {
		return nil, lakeError(err)
	}
	var snap int64
	if w.SnapshotID != nil && w.SnapshotID != "" {
		if snap, err = snapshotID(w.SnapshotID); err != nil {
			return nil, Permanent(ErrBadInput, "snapshot_id: %v", err)
		}
		if tbl.Metadata().SnapshotByID(snap) == nil {
			return nil, Permanent(ErrBadInput, "table %s has no snapshot %d", w.Table, snap)
		}
	} else {
		cur := tbl.CurrentSnapshot()
		if cur == nil {
			return nil, Permanent(ErrBadInput, "table %s has no data", w.Table)
		}
		snap = cur.SnapshotID
	}
	projection, err := tbl.Scan(table.WithSnapshotID(snap)).Projection()
	if err != nil {
		return nil, fmt.Errorf("schema of %s at snapshot %d: %w", w.Table, snap, err)
	}
	arrowSchema, err := table.SchemaToArrowSchema(projection, nil, true, false)
	if err != nil {
		return nil, err
	}
	schema, err := dataset.Infer(arrowSchema, w.Label, w.DateColumn, w.RequestID, w.Dense, w.Sparse, w.Slice)
	if err != nil {
		return nil, Permanent(ErrBadInput, "table %s: %v", w.Table, err)
	}

	// The inputs are the resolved block plus the snapshot actually read,
	// so that a split of the current snapshot is redone once it moves.
	fingerprint, err := checkpoint.Fingerprint(map[string]any{"with": in.With, "snapshot": snap})
	if err != nil {
		return nil, Permanent(ErrBadInput, "%v", err)
	}
	key := checkpoint.Key{Pipeline: in.Pipeline, Run: in.RunID, Node: in.Node}
	log := s.Logger.With("pipeline", in.Pipeline, "run", in.RunID, "node", in.Node, "table", w.Table, "snapshot", snap)
	out, hit, err := checkpoint.Do(ctx, s.Store, key, fingerprint, func(ctx context.Context, cw *checkpoint.Writer) (splitOutputs, error) {
		return s.write(ctx, cw, tbl, snap, schema, w, from, hasFrom, log)
	})
	if err != nil {
		if errors.Is(err, errSplitInput) {
			return nil, Permanent(ErrBadInput, "%v", err)
		}
		return nil, err
	}
	out.Fingerprint = fingerprint
	log.Info("split ready", "train_rows", out.TrainRows, "eval_rows", out.EvalRows, "reused", hit)
	return map[string]any{
		"uri": out.URI, "manifest": out.Manifest, "train_rows": out.TrainRows, "eval_rows": out.EvalRows,
		"eval_dates": out.EvalDates, "snapshot_id": out.SnapshotID, "schema": out.Schema,
		"fingerprint": out.Fingerprint, "reused": hit,
	}, nil
}

// errSplitInput marks a split that cannot be made from this data.
var errSplitInput = errors.New("cannot split")

func (s *Splits) write(ctx context.Context, cw *checkpoint.Writer, tbl *table.Table, snap int64, schema dataset.Schema,
	w splitWith, from backfill.Day, hasFrom bool, log *slog.Logger) (splitOutputs, error) {
	// Pass 1: the dates, to know which are held out.
	dates, err := scanDates(ctx, tbl, snap, schema.Date)
	if err != nil {
		return splitOutputs{}, err
	}
	eval, err := dataset.EvalDates(dates, w.EvalDays, int32(from), hasFrom)
	if err != nil {
		return splitOutputs{}, fmt.Errorf("%w: table %s: %v", errSplitInput, w.Table, err)
	}

	pq := parquet.SchemaOf(reflect.New(schema.RowType()).Interface())
	opts := checkpoint.Options{MaxFileRows: w.MaxFileRows}
	train, err := checkpoint.CreateRows(cw, TrainDataset, pq, opts)
	if err != nil {
		return splitOutputs{}, err
	}
	held, err := checkpoint.CreateRows(cw, EvalDataset, pq, opts)
	if err != nil {
		return splitOutputs{}, err
	}

	// Pass 2: the rows.
	_, recs, err := tbl.Scan(table.WithSnapshotID(snap), table.WithSelectedFields(schema.TableColumns()...)).ToArrowRecords(ctx)
	if err != nil {
		return splitOutputs{}, fmt.Errorf("scan %s: %w", w.Table, err)
	}
	conv := dataset.NewConverter(schema)
	var trainBuf, evalBuf []any
	flush := func(d *checkpoint.RowWriter, buf *[]any, force bool) error {
		if len(*buf) == 0 || !force && len(*buf) < splitBatch {
			return nil
		}
		_, err := d.Write(*buf)
		*buf = (*buf)[:0]
		return err
	}
	var rows, trainRows, evalRows int64
	for rec, err := range recs {
		if err != nil {
			return splitOutputs{}, fmt.Errorf("scan %s: %w", w.Table, err)
		}
		converted, err := conv.Rows(rec)
		rec.Release()
		if err != nil {
			return splitOutputs{}, fmt.Errorf("%w: %v", errSplitInput, err)
		}
		for _, r := range converted {
			if eval[r.Date] {
				evalBuf = append(evalBuf, r.Value)
				evalRows++
			} else {
				trainBuf = append(trainBuf, r.Value)
				trainRows++
			}
		}
		rows += int64(len(converted))
		if err := flush(train, &trainBuf, false); err != nil {
			return splitOutputs{}, err
		}
		if err := flush(held, &evalBuf, false); err != nil {
			return splitOutputs{}, err
		}
	}
	if err := flush(train, &trainBuf, true); err != nil {
		return splitOutputs{}, err
	}
	if err := flush(held, &evalBuf, true); err != nil {
		return splitOutputs{}, err
	}
	trainRef, err := train.Close()
	if err != nil {
		return splitOutputs{}, err
	}
	if _, err := held.Close(); err != nil {
		return splitOutputs{}, err
	}
	if trainRows == 0 || evalRows == 0 {
		return splitOutputs{}, fmt.Errorf("%w: %d training and %d held-out rows with a label", errSplitInput, trainRows, evalRows)
	}
	var evalDates []string
	for d := range eval {
		evalDates = append(evalDates, backfill.Day(d).String())
	}
	slices.Sort(evalDates)
	log.Info("split written", "rows", rows, "train", trainRows, "eval", evalRows, "eval_dates", evalDates)
	return splitOutputs{
		URI:        keyURI(s.Store, trainRef.Manifest),
		Manifest:   trainRef.Manifest,
		TrainRows:  trainRows,
		EvalRows:   evalRows,
		EvalDates:  evalDates,
		SnapshotID: strconv.FormatInt(snap, 10),
		Schema:     schema,
	}, nil
}

// scanDates reads the date column of a snapshot.
func scanDates(ctx context.Context, tbl *table.Table, snap int64, col string) ([]int32, error) {
	_, recs, err := tbl.Scan(table.WithSnapshotID(snap), table.WithSelectedFields(col)).ToArrowRecords(ctx)
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
			seen[d] = true
		}
	}
	out := make([]int32, 0, len(seen))
	for d := range seen {
		out = append(out, d)
	}
	return out, nil
}
