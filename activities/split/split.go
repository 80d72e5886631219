package split

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"github.com/retrain-ml/retrain/activities/internal/objects"
	lakenode "github.com/retrain-ml/retrain/activities/lake"
	"github.com/retrain-ml/retrain/activities/progenv"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/dataset"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/internal/number"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/nodetype"
)

// Datasets of a split checkpoint.
const (
	TrainDataset = "train"
	EvalDataset  = "eval"
)

// doc is the split node type's description.
const doc = "Checkpoint the run's date window of a training table (at a pinned snapshot), or of plain Parquet files (files), as a train/eval split: only rows with " +
	"start_date <= date <= end_date are read; the last eval_days dates of the window (or every date from eval_from) are held out. " +
	"Fails before training when the window has no rows, when eval_from is outside it, or when a feature's null rate on the " +
	"training or held-out rows is above max_null_rate (per-feature overrides in max_null_rates). Writes datasets train and eval " +
	"as Parquet with one named column per feature, under checkpoints/<pipeline>/<run>/<node>/; a retry or a rerun of the run with " +
	"the same inputs reuses it. Outputs the window, the train and eval dates, row counts and per-feature null rates; " +
	"${nodes.ID.outputs.uri} is what train and evaluate read."

// SplitType is the `split` node type's declaration (its name, fields and
// outputs), for code that names or documents it without running it.
var SplitType = (&Splits{}).Type().NodeType

// With is a split node's `with` block: the one place its fields, their
// defaults and docs are declared.
type With struct {
	Table string `json:"table" doc:"namespace.table of the training data (or files)"`
	// Files lets a team whose data is not in Iceberg yet get the same
	// window-correct split, and so train and evaluate on the same rows.
	Files      any      `json:"files" doc:"instead of table: Parquet files, a glob or a list of globs, local (inside the worker's --allow-paths) or s3:// (in the worker's object store); a pattern ending in / takes every .parquet file below it. The date column is a DATE, a TIMESTAMP (its UTC day) or a YYYY-MM-DD string; files in a <date_column>=YYYY-MM-DD folder outside the window are never opened, and row groups whose date statistics are outside it never read. Not with join or snapshot_id"`
	SnapshotID any      `json:"snapshot_id" doc:"snapshot to read, e.g. ${nodes.promote.outputs.snapshot_id} (default: the current one)"`
	StartDate  string   `json:"start_date" required:"true" doc:"first date of the run's window, YYYY-MM-DD: rows before it are never read"`
	EndDate    string   `json:"end_date" required:"true" doc:"last date of the run's window, inclusive"`
	Dense      []string `json:"dense" doc:"numeric feature columns"`
	Sparse     []string `json:"sparse" doc:"integer id (or list of ids) feature columns"`
	Label      string   `json:"label" default:"label" doc:"label column, 0/1"`
	DateColumn string   `json:"date_column" default:"date" doc:"date column the window and the split are by"`
	RequestID  string   `json:"request_id" default:"request_id" doc:"key column, kept (when the table has it) so results can be joined back"`
	Slice      string   `json:"slice" doc:"column whose values key per-slice metrics in evaluate"`
	EvalDays   int      `json:"eval_days" default:"1" doc:"hold out the last N dates of the window"`
	EvalFrom   string   `json:"eval_from" doc:"instead: hold out every date of the window from this one, YYYY-MM-DD"`
	// The default limit is there because a feature missing from most rows
	// is almost always a backfill that joined nothing, and training on it
	// would go unnoticed.
	MaxNullRate  float64 `json:"max_null_rate" default:"0.5" doc:"fail if a feature is null in more than this share of the training or held-out rows (0..1; 1 turns the check off)"`
	MaxNullRates any     `json:"max_null_rates" nested:"*:number" doc:"per-feature limits overriding max_null_rate, e.g. {u_recent_ads: 0.9}"`
	MaxFileRows  int64   `json:"max_file_rows" doc:"start a new Parquet file after this many rows"`
	// Join lets an experiment train on staged features without promoting
	// them: the rows and values are those the promoted table would give.
	Join []JoinEntry `json:"join" doc:"staging tables joined onto the rows as they are read, bucket by bucket (no promotion): a list of {table, snapshot_id, columns (default all features), prefix, keys (training column -> staging column where names differ, e.g. {request_id: requestId})}, typically table: ${nodes.stage.outputs.staging_table}, snapshot_id: ${nodes.stage.outputs.snapshot_id}; bucket counts may differ (one dividing the other: bucket join; otherwise a hash join by date, said in the summary)"`
}

// Outputs are what a split node outputs: its checkpoint's Record,
// with the coverage's per-feature rows, a summary line, and whether the
// checkpoint was reused.
type Outputs struct {
	URI         string                    `json:"uri"`
	Manifest    string                    `json:"manifest"`
	TrainRows   int64                     `json:"train_rows"`
	EvalRows    int64                     `json:"eval_rows"`
	Window      dataset.Window            `json:"window"`
	TrainDates  []string                  `json:"train_dates"`
	EvalDates   []string                  `json:"eval_dates"`
	Coverage    []dataset.FeatureCoverage `json:"coverage"`
	SnapshotID  string                    `json:"snapshot_id"` // a string: JSON numbers lose int64 digits
	Schema      dataset.Schema            `json:"schema"`
	Fingerprint string                    `json:"fingerprint"`
	Reused      bool                      `json:"reused"`
	Joined      []features.JoinedColumn   `json:"joined"`
	Files       *FilesRead                `json:"files"`
	Summary     string                    `json:"summary"`
}

// givesColumns reports whether a dense or sparse value may name columns:
// a non-empty list, or a reference (a list param, an output) only the run
// knows.
func givesColumns(v any) bool {
	if l, ok := v.([]any); ok {
		return len(l) > 0
	}
	return dags.HasRef(v)
}

func checkSplit(with map[string]any) error {
	if n, ok := with["eval_days"].(float64); ok && n < 1 {
		return fmt.Errorf("eval_days must be at least 1, got %v", n)
	}
	_, days := with["eval_days"]
	from, hasFrom := with["eval_from"]
	if days && hasFrom {
		return errors.New("give eval_days or eval_from, not both")
	}
	if err := lakenode.CheckDates(with); err != nil {
		return err
	}
	if err := checkJoin(with["join"]); err != nil {
		return err
	}
	if s, ok := from.(string); ok && !dags.HasRef(s) {
		d, err := backfill.ParseDay(s)
		if err != nil {
			return fmt.Errorf("eval_from: %w", err)
		}
		if rng, ok := literalRange(with); ok && !rng.Contains(d) {
			return fmt.Errorf("eval_from %s is outside the window %s: held-out dates must be inside it", s, rng)
		}
	}
	if !givesColumns(with["dense"]) && !givesColumns(with["sparse"]) {
		return errors.New("give dense and/or sparse feature columns")
	}
	if v, ok := with["snapshot_id"]; ok && !dags.HasRef(v) {
		if _, err := lakenode.SnapshotID(v); err != nil {
			return fmt.Errorf("snapshot_id: %w", err)
		}
	}
	// An absent max_null_rate takes its default, which is in range.
	var limits dataset.Limits
	if r, ok := with["max_null_rate"].(float64); ok {
		limits.Default = r
	}
	if v, ok := with["max_null_rates"]; ok && !dags.HasRef(v) {
		var err error
		if limits.PerFeature, err = nullRateOverrides(v); err != nil {
			return err
		}
	}
	if err := limits.CheckRates(); err != nil {
		return err
	}
	// Last, so that a block's other mistakes are said first.
	return checkSource(with)
}

// literalRange is the window of with when both dates are literal.
func literalRange(with map[string]any) (backfill.DateRange, bool) {
	start, sok := with["start_date"].(string)
	end, eok := with["end_date"].(string)
	if !sok || !eok || dags.HasRef(start) || dags.HasRef(end) {
		return backfill.DateRange{}, false
	}
	rng, err := backfill.ParseDateRange(start, end)
	return rng, err == nil
}

// nullRateOverrides reads max_null_rates: a map of feature to a rate in
// 0..1.
func nullRateOverrides(v any) (map[string]float64, error) {
	if v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("max_null_rates: want a map of feature name to rate, got %T", v)
	}
	out := make(map[string]float64, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] == nil {
			return nil, fmt.Errorf("max_null_rates: %s: want a rate, got null", k)
		}
		f, err := number.Figure(m[k])
		if err != nil {
			return nil, fmt.Errorf("max_null_rates: %s: %w", k, err)
		}
		out[k] = f
	}
	return out, dataset.Limits{PerFeature: out}.CheckRates()
}

// Splits runs split nodes: they read the lake and write the object store.
type Splits struct {
	Catalog *lake.Lazy
	Store   *s3store.Store
	Logger  *slog.Logger
	// Env says where local files may lie (--allow-paths): a starter must
	// not make the worker read what it likes off its disk.
	Env progenv.Policy
}

// Record is the split's artifact: what its checkpoint manifest records, read
// back by the nodes that load the split (train, evaluate) and on a hit.
type Record struct {
	URI       string `json:"uri"`
	Manifest  string `json:"manifest"`
	TrainRows int64  `json:"train_rows"`
	EvalRows  int64  `json:"eval_rows"`
	// Window is the run's date window the split read; TrainDates and
	// EvalDates are the dates inside it that have rows.
	Window      dataset.Window         `json:"window"`
	TrainDates  []string               `json:"train_dates"`
	EvalDates   []string               `json:"eval_dates"`
	Coverage    dataset.CoverageReport `json:"coverage"`
	SnapshotID  string                 `json:"snapshot_id"`
	Schema      dataset.Schema         `json:"schema"`
	Fingerprint string                 `json:"fingerprint"`
	// Joined lists the columns joined from staging tables (see With.Join)
	// and the snapshot each was read at; JoinSummary says how.
	Joined      []features.JoinedColumn `json:"joined,omitempty"`
	JoinSummary string                  `json:"join_summary,omitempty"`
	// Files says which Parquet files a split from files read (no
	// SnapshotID then).
	Files *FilesRead `json:"files,omitempty"`
}

// Type is the split node type, run by s.
func (s *Splits) Type() nodetype.Type {
	return nodetype.New(dags.NodeType{Name: "split", Doc: doc, Check: checkSplit}, s.split)
}

// Run runs one attempt of a split node, as s.Type() does.
func (s *Splits) Run(ctx context.Context, in nodetype.Input) (map[string]any, error) {
	return s.Type().Run(ctx, in)
}

// split runs one attempt of a split node.
func (s *Splits) split(ctx context.Context, in nodetype.Input, w With) (Outputs, error) {
	window, err := backfill.ParseDateRange(w.StartDate, w.EndDate)
	if err != nil {
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "the run's window: %v", err)
	}
	var (
		from    backfill.Day
		hasFrom bool
	)
	if w.EvalFrom != "" {
		d, err := backfill.ParseDay(w.EvalFrom)
		if err != nil {
			return Outputs{}, nodetype.Permanent(errtype.BadInput, "eval_from: %v", err)
		}
		if !window.Contains(d) {
			return Outputs{}, nodetype.Permanent(errtype.BadInput, "eval_from %s is outside the window %s: held-out dates must be inside it", w.EvalFrom, window)
		}
		from, hasFrom = d, true
	}
	limits := dataset.Limits{Default: w.MaxNullRate}
	if limits.PerFeature, err = nullRateOverrides(w.MaxNullRates); err == nil {
		err = limits.CheckRates()
	}
	if err != nil {
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	if s.Store == nil {
		return Outputs{}, objects.NoStore()
	}
	patterns, err := filePatterns(w.Files)
	if err != nil {
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	var (
		src    rowSource
		schema dataset.Schema
		join   *features.Join
		joined []string
		inputs = map[string]any{"with": in.With}
	)
	switch {
	case w.Table != "" && len(patterns) > 0:
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "give table (an Iceberg table) or files (Parquet files), not both")
	case len(patterns) > 0 && len(w.Join) > 0:
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "join works with table only: staging tables join by the training table's partitions, and files have none")
	case len(patterns) > 0:
		fs, err := s.openFiles(ctx, patterns, w, window)
		if err != nil {
			return Outputs{}, err
		}
		if schema, err = dataset.Infer(fs.want, w.Label, w.DateColumn, w.RequestID, w.Dense, w.Sparse, w.Slice); err != nil {
			return Outputs{}, nodetype.Permanent(errtype.BadInput, "files %s: %v", fs.files[0].Name, err)
		}
		// A changed or added file in the window redoes the split.
		inputs["files"] = fs.files
		src = fs
	case w.Table == "":
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "give table (namespace.table of the training data) or files (Parquet files by glob, local or s3://)")
	default:
		ts, err := s.openTable(ctx, w, window, limits)
		if err != nil {
			return Outputs{}, err
		}
		src, schema, join, joined = ts, ts.schema, ts.join, ts.joined
		// The snapshot actually read, so that a split of the current
		// snapshot is redone once it moves.
		inputs["snapshot"] = ts.snap
		if join != nil {
			inputs["joined"] = join.Columns() // with the staging snapshots read
		}
	}
	if err := limits.Check(schema); err != nil {
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	if join != nil {
		// Only the staging columns the split uses are read and recorded.
		join.Keep(schema.TableColumns())
		joined = joined[:0]
		for _, c := range join.Columns() {
			joined = append(joined, c.Name)
		}
		if len(join.Sides) == 0 {
			join = nil
		}
	}

	fingerprint, err := checkpoint.Fingerprint(inputs)
	if err != nil {
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	key := checkpoint.Key{Pipeline: in.Pipeline, Run: in.RunID, Node: in.Node}
	log := s.Logger.With("pipeline", in.Pipeline, "run", in.RunID, "node", in.Node, "source", src.name())
	out, hit, err := checkpoint.Do(ctx, s.Store, key, fingerprint, func(ctx context.Context, cw *checkpoint.Writer) (Record, error) {
		return s.write(ctx, cw, src, schema, splitPlan{with: w, window: window, from: from, hasFrom: hasFrom, limits: limits, join: join, joined: joined}, log)
	})
	if err != nil {
		switch {
		case errors.Is(err, errSplitInput):
			return Outputs{}, nodetype.Permanent(errtype.BadInput, "%v", err)
		case errors.Is(err, errSplitCoverage):
			return Outputs{}, nodetype.Permanent(errtype.CheckFailed, "%v", err)
		case features.IsBadInput(err):
			return Outputs{}, nodetype.Permanent(errtype.BadInput, "%v", err)
		}
		return Outputs{}, err
	}
	out.Fingerprint = fingerprint
	log.Info("split ready", "window", out.Window.String(), "train_rows", out.TrainRows, "eval_rows", out.EvalRows,
		"eval_dates", out.EvalDates, "reused", hit)
	return Outputs{
		URI: out.URI, Manifest: out.Manifest, TrainRows: out.TrainRows, EvalRows: out.EvalRows,
		Window: out.Window, TrainDates: out.TrainDates, EvalDates: out.EvalDates, Coverage: out.Coverage.Features,
		SnapshotID: out.SnapshotID, Schema: out.Schema, Fingerprint: out.Fingerprint, Reused: hit,
		Joined: out.Joined, Files: out.Files, Summary: out.summary(),
	}, nil
}

// summary says in one line which rows the split holds, for the CLI and
// the Web UI: the window, the rows on each side, and the worst null rate.
func (o Record) summary() string {
	worst, name := 0.0, ""
	for _, f := range o.Coverage.Features {
		if r := max(f.TrainNullRate, f.EvalNullRate); r > worst || name == "" {
			worst, name = r, f.Feature
		}
	}
	dates := func(ds []string) string {
		if len(ds) == 0 {
			return "no dates"
		}
		return dataset.Window{Start: ds[0], End: ds[len(ds)-1]}.String()
	}
	s := fmt.Sprintf("window %s: %s train rows (%s), %s eval rows (%s)", o.Window, number.Count(o.TrainRows), dates(o.TrainDates), number.Count(o.EvalRows), dates(o.EvalDates))
	if name != "" {
		s += fmt.Sprintf("; max null rate %.3f (%s)", worst, name)
	}
	if o.JoinSummary != "" {
		s += "; " + o.JoinSummary
	}
	if o.Files != nil {
		s += "; " + o.Files.String()
	}
	return s
}

// Deps are what the split node type needs from the worker.
type Deps struct {
	Catalog *lake.Lazy
	Store   *s3store.Store
	Logger  *slog.Logger
	Env     progenv.Policy
}

// Type returns the split node type.
func Type(d Deps) nodetype.Type {
	s := &Splits{Catalog: d.Catalog, Store: d.Store, Logger: d.Logger, Env: d.Env}
	return s.Type()
}
