package split

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	lakenode "github.com/retrain-ml/retrain/activities/lake"
	"github.com/retrain-ml/retrain/activities/progenv"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/internal/backfill"
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
	"the same inputs reuses it. The split of a table fans out like promote_features: a plan activity, one activity per bucket group " +
	"(bucket_groups) on any worker of the queue with a free group slot (--activity-concurrency), each writing its part of both datasets, " +
	"and one that checks the coverage and writes the manifest; a dead worker's group moves to another after at most 30 s without a heartbeat " +
	"(or the node's shorter heartbeat). A split of files is one activity. " +
	"Outputs the window, the train and eval dates, row counts and per-feature null rates; " +
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
	Files      any      `json:"files" doc:"instead of table: Parquet files, a glob or a list of globs, local (inside the worker's --allow-paths) or s3:// (in the worker's object store); a pattern ending in / takes every .parquet file below it. Hive-style key=value folders read as columns (the date column's as a DATE, others as strings). The date column is a DATE, a TIMESTAMP (its day in timezone) or a YYYY-MM-DD string, in the files or their folders; files in a <date_column>=YYYY-MM-DD folder outside the window are never opened (under date= folders when the date column is a timestamp: a day's margin either side), and row groups whose date statistics are outside it never read. Not with snapshot_id; join then takes feature files"`
	SnapshotID any      `json:"snapshot_id" doc:"snapshot to read, e.g. ${nodes.promote.outputs.snapshot_id} (default: the current one)"`
	StartDate  string   `json:"start_date" required:"true" doc:"first date of the run's window, YYYY-MM-DD: rows before it are never read"`
	EndDate    string   `json:"end_date" required:"true" doc:"last date of the run's window, inclusive"`
	Dense      []string `json:"dense" doc:"numeric feature columns"`
	Sparse     []string `json:"sparse" doc:"integer id (or list of ids) feature columns"`
	Label      string   `json:"label" default:"label" doc:"label column, 0/1"`
	DateColumn string   `json:"date_column" default:"date" doc:"date column the window and the split are by; with files, a <date_column>=YYYY-MM-DD folder gives it to the files below it that have no such column"`
	// Timezone exists because a TIMESTAMP's day depends on where the day
	// is: a Berlin team's run for the 21st trains on Berlin's 21st.
	Timezone  string `json:"timezone" doc:"IANA time zone (e.g. Europe/Berlin) in which a TIMESTAMP date column's values take their day, for the window, eval_days and joins of files (default: the schedule's time zone when a schedule started the run, else UTC); a timestamp without a zone is wall-clock time and keeps its date"`
	RequestID string `json:"request_id" default:"request_id" doc:"key column, kept (when the table has it) so results can be joined back"`
	Slice     string `json:"slice" doc:"column whose values key per-slice metrics in evaluate"`
	EvalDays  int    `json:"eval_days" default:"1" doc:"hold out the last N dates of the window"`
	EvalFrom  string `json:"eval_from" doc:"instead: hold out every date of the window from this one, YYYY-MM-DD"`
	// The default limit is there because a feature missing from most rows
	// is almost always a backfill that joined nothing, and training on it
	// would go unnoticed.
	MaxNullRate  float64 `json:"max_null_rate" default:"0.5" doc:"fail if a feature is null in more than this share of the training or held-out rows (0..1; 1 turns the check off)"`
	MaxNullRates any     `json:"max_null_rates" nested:"*:number" doc:"per-feature limits overriding max_null_rate, e.g. {u_recent_ads: 0.9}"`
	MaxFileRows  int64   `json:"max_file_rows" doc:"start a new Parquet file after this many rows"`
	// Join lets an experiment train on staged features without promoting
	// them: the rows and values are those the promoted table would give.
	Join []JoinEntry `json:"join" doc:"staging tables joined onto the rows as they are read, bucket by bucket (no promotion): a list of {table, snapshot_id, columns (default all features), prefix, keys (training column -> staging column where names differ, e.g. {request_id: requestId})}, typically table: ${nodes.stage.outputs.staging_table}, snapshot_id: ${nodes.stage.outputs.snapshot_id}; bucket counts may differ (one dividing the other: bucket join; otherwise a hash join by date, said in the summary). With files: feature files joined point-in-time as stage_features joins a feature table, a list of {files, keys (entity columns, e.g. [user_id], or a map of training column -> feature column), alignment (previous_day, as_of or same_day), columns (default all but keys, date and time columns), prefix, date_column (default the split's), time_column (as_of: publication time, default ts), event_time_column (as_of: the training rows' event time, default event_ts), lookback_days (as_of, default 7)}: a row never gets a feature row published after its event; only the days the alignment needs are read, a day at a time"`
	// BucketGroups fans a table's split out, as promote_features does.
	BucketGroups int `json:"bucket_groups" doc:"activities the split of a table fans out to, each a group of its buckets on any worker with a free group slot (default: one per bucket; fewer when a joined staging table has fewer buckets, one when one is hash-joined, so that each staging partition is read by one group)"`
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
	Timezone    string                    `json:"timezone"`
	Summary     string                    `json:"summary"`
	// S3 is what the split's steps sent to S3 (lake and object store),
	// all together: the run report's S3 column.
	S3 *s3store.UsageFigures `json:"s3,omitempty"`
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
	if n, ok := with["bucket_groups"].(float64); ok && n < 1 {
		return fmt.Errorf("bucket_groups must be at least 1, got %v", n)
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
	if tz, ok := with["timezone"].(string); ok && tz != "" && !dags.HasRef(tz) {
		if err := dags.CheckTimezone(tz); err != nil {
			return fmt.Errorf("timezone: %w", err)
		}
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
	// Timezone is the zone the split of files took a timestamp's day in.
	Timezone string `json:"timezone,omitempty"`
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
	if o.Timezone != "" && o.Timezone != "UTC" {
		s += "; days in " + o.Timezone
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
	return s.Type().WithCache(s.cache())
}
