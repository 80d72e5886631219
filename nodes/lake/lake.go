package lake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/colstats"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/nodetype"
)

// Names of the activities the promote_features workflow runs.
const (
	PromotePlanActivity    = "PromoteFeaturesPlan"
	PromoteBucketsActivity = "PromoteFeaturesBuckets"
	PromoteCommitActivity  = "PromoteFeaturesCommit"
	PromoteWorkflow        = "PromoteFeatures"
)

// Lake runs the steps that read and write the Iceberg lake.
type Lake struct {
	Catalog *lake.Lazy
	Logger  *slog.Logger
}

// Open opens the catalog; not configured is bad input, which no retry fixes.
func (l *Lake) Open(ctx context.Context) (*lake.Catalog, error) {
	cat, err := l.Catalog.Catalog(ctx)
	if err != nil {
		// Not configured is a setup error no retry will fix.
		if !l.configured() {
			return nil, nodetype.Permanent(errtype.BadInput, "%v", err)
		}
		return nil, err
	}
	return cat, nil
}

func (l *Lake) configured() bool { return l.Catalog.Configured() }

// openWith decodes a step's `with` into spec (a bad one is bad input) and
// opens the catalog.
func (l *Lake) openWith(ctx context.Context, with map[string]any, spec any) (*lake.Catalog, error) {
	if err := nodetype.Decode(with, spec); err != nil {
		return nil, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	return l.Open(ctx)
}

// Error maps the features package's error kinds to Temporal errors.
func Error(err error) error {
	switch {
	case err == nil:
		return nil
	case features.IsBadInput(err), errors.Is(err, lake.ErrNoSuchSnapshot), errors.Is(err, lake.ErrNoSuchTable):
		return nodetype.Permanent(errtype.BadInput, "%v", err)
	case features.IsCheckFailed(err):
		return nodetype.Permanent(errtype.CheckFailed, "%v", err)
	}
	return err
}

// CheckDates validates literal start_date/end_date values.
func CheckDates(with map[string]any) error {
	start, sok := with["start_date"].(string)
	end, eok := with["end_date"].(string)
	if sok && !dags.HasRef(start) {
		if _, err := backfill.ParseDay(start); err != nil {
			return fmt.Errorf("start_date: %w", err)
		}
	}
	if eok && !dags.HasRef(end) {
		if _, err := backfill.ParseDay(end); err != nil {
			return fmt.Errorf("end_date: %w", err)
		}
	}
	if sok && eok && !dags.HasRef(start) && !dags.HasRef(end) {
		if _, err := backfill.ParseDateRange(start, end); err != nil {
			return err
		}
	}
	return nil
}

// StageFeaturesType is the `stage_features` node type.
var StageFeaturesType = dags.NodeType{
	Name: "stage_features",
	Doc:  "Stage 1 of a feature backfill: join feature columns onto the training table's keys for a date range into a staging table (same partitioning, replaced on rerun).",
	Fields: []dags.Field{
		{Name: "training_table", Type: dags.FieldString, Required: true, Doc: "namespace.table of the training data"},
		{Name: "feature_table", Type: dags.FieldString, Required: true, Doc: "namespace.table of the feature group"},
		{Name: "keys", Type: dags.FieldStringList, Required: true, Doc: "entity key column(s), in both tables"},
		{Name: "start_date", Type: dags.FieldString, Required: true, Doc: "first training date, YYYY-MM-DD"},
		{Name: "end_date", Type: dags.FieldString, Required: true, Doc: "last training date, inclusive"},
		{Name: "alignment", Type: dags.FieldString, Required: true, Doc: "same_day, previous_day or as_of"},
		{Name: "features", Type: dags.FieldStringList, Doc: "feature columns (default: all but keys and time columns)"},
		{Name: "prefix", Type: dags.FieldString, Doc: "prefix for the staged column names"},
		{Name: "staging_table", Type: dags.FieldString, Doc: "output table (default: <ns>.<training>__stage__<feature table>)"},
		{Name: "date_column", Type: dags.FieldString, Doc: "date column (default date)"},
		{Name: "event_time_column", Type: dags.FieldString, Doc: "training event time, for as_of (default event_ts)"},
		{Name: "feature_time_column", Type: dags.FieldString, Doc: "feature row time, for as_of (default ts)"},
		{Name: "lookback_days", Type: dags.FieldInt, Doc: "as_of: how far back a feature row may be (default 7)"},
	},
	Outputs: []string{"staging_table", "snapshot_id", "rows", "matched", "feature_columns", "location", "start_date", "end_date"},
	Check: func(with map[string]any) error {
		if a, ok := with["alignment"].(string); ok && !dags.HasRef(a) {
			if _, err := backfill.ParseAlignment(a); err != nil {
				return err
			}
		}
		return CheckDates(with)
	},
}

// Stage runs a stage_features node.
func (l *Lake) Stage(ctx context.Context, in nodetype.Input) (map[string]any, error) {
	var spec features.StageSpec
	cat, err := l.openWith(ctx, in.With, &spec)
	if err != nil {
		return nil, err
	}
	res, err := features.Stage(ctx, cat, spec, l.log(in))
	if err != nil {
		return nil, Error(err)
	}
	return map[string]any{
		"staging_table": res.Staging, "snapshot_id": strconv.FormatInt(res.SnapshotID, 10),
		"rows": res.Rows, "matched": res.Matched, "feature_columns": res.Features, "location": res.Location,
		"start_date": spec.StartDate, "end_date": spec.EndDate,
	}, nil
}

// FeatureStatsType is the `feature_stats` node type.
var FeatureStatsType = dags.NodeType{
	Name: "feature_stats",
	Doc: "Profile feature columns (count, null rate, mean, std, min/max, p50/p99, distinct) into a JSON and HTML report next to the table; " +
		"optional thresholds fail the node. With snapshot_id (a stage node's ${nodes.ID.outputs.snapshot_id}) only the files that snapshot " +
		"added are read: what this run staged, never partitions earlier runs left in the table. Outputs say which rows were profiled (scope, dates).",
	Fields: []dags.Field{
		{Name: "table", Type: dags.FieldString, Required: true, Doc: "namespace.table to profile (a staging table)"},
		{Name: "snapshot_id", Type: dags.FieldAny, Doc: "profile only the files this snapshot added, e.g. ${nodes.stage.outputs.snapshot_id} (default: the whole table)"},
		{Name: "columns", Type: dags.FieldStringList, Doc: "columns (default: the staged features)"},
		{Name: "start_date", Type: dags.FieldString, Doc: "only rows from this date"},
		{Name: "end_date", Type: dags.FieldString, Doc: "only rows up to this date"},
		{Name: "date_column", Type: dags.FieldString, Doc: "date column for the range (default date)"},
		{Name: "max_null_rate", Type: dags.FieldNumber, Doc: "fail if a column's null rate is above this (0..1)"},
		{Name: "min_distinct", Type: dags.FieldInt, Doc: "fail if a column has fewer distinct values"},
		{Name: "min_std", Type: dags.FieldNumber, Doc: "fail if a numeric column's standard deviation is below this"},
	},
	Outputs: []string{"report_uri", "html_uri", "rows", "columns", "snapshot_id", "scope", "dates", "files", "summary"},
	Check: func(with map[string]any) error {
		if r, ok := with["max_null_rate"].(float64); ok && (r < 0 || r > 1) {
			return fmt.Errorf("max_null_rate %v is not between 0 and 1", r)
		}
		if v, ok := with["snapshot_id"]; ok && !dags.HasRef(v) {
			if _, err := SnapshotID(v); err != nil {
				return fmt.Errorf("snapshot_id: %w", err)
			}
		}
		return CheckDates(with)
	},
}

type statsWith struct {
	features.StatsSpec
	Snapshot    any      `json:"snapshot_id"`
	MaxNullRate *float64 `json:"max_null_rate"`
	MinDistinct *int64   `json:"min_distinct"`
	MinStd      *float64 `json:"min_std"`
}

// Stats runs a feature_stats node.
func (l *Lake) Stats(ctx context.Context, in nodetype.Input) (map[string]any, error) {
	var w statsWith
	cat, err := l.openWith(ctx, in.With, &w)
	if err != nil {
		return nil, err
	}
	w.StatsSpec.Thresholds = colstats.Thresholds{MaxNullRate: w.MaxNullRate, MinDistinct: w.MinDistinct, MinStd: w.MinStd}
	if w.Snapshot != nil && w.Snapshot != "" {
		if w.StatsSpec.SnapshotID, err = SnapshotID(w.Snapshot); err != nil {
			return nil, nodetype.Permanent(errtype.BadInput, "snapshot_id: %v", err)
		}
	}
	res, err := features.Stats(ctx, cat, w.StatsSpec, l.log(in))
	if err != nil {
		return nil, Error(err)
	}
	return map[string]any{
		"report_uri": res.ReportURI, "html_uri": res.HTMLURI, "rows": res.Rows,
		"columns": res.Columns, "snapshot_id": strconv.FormatInt(res.Snapshot, 10),
		"scope": res.Scope, "dates": res.Dates, "files": res.Files,
		"summary": fmt.Sprintf("%d rows: %s", res.Rows, res.Scope),
	}, nil
}

// PromoteFeaturesType is the `promote_features` node type: a child
// workflow that fans out one activity per group of buckets.
var PromoteFeaturesType = dags.NodeType{
	Name:   "promote_features",
	Doc:    "Stage 2 of a feature backfill: join staging tables into the training table bucket by bucket (one activity per bucket group) and commit one snapshot replacing the affected partitions; redone if another commit lands first.",
	Kind:   dags.KindWorkflow,
	Target: PromoteWorkflow,
	Fields: []dags.Field{
		{Name: "training_table", Type: dags.FieldString, Required: true, Doc: "namespace.table to promote into"},
		{Name: "staging_tables", Type: dags.FieldStringList, Required: true, Doc: "staging tables whose feature columns are promoted"},
		{Name: "start_date", Type: dags.FieldString, Required: true, Doc: "first date, YYYY-MM-DD"},
		{Name: "end_date", Type: dags.FieldString, Required: true, Doc: "last date, inclusive"},
		{Name: "date_column", Type: dags.FieldString, Doc: "date column (default date)"},
		{Name: "bucket_groups", Type: dags.FieldInt, Doc: "activities to fan out to (default: one per bucket)"},
	},
	Outputs: []string{"previous_snapshot_id", "snapshot_id", "rows", "matched", "columns", "partitions", "files", "rounds"},
	Check:   CheckDates,
}

// PromotePlanInput starts one round of a promotion.
type PromotePlanInput struct {
	With map[string]any `json:"with"`
	ID   string         `json:"promotion_id"`
}

// PromoteBucketsInput is one bucket group of a round.
type PromoteBucketsInput struct {
	Plan    *features.PromotionPlan `json:"plan"`
	Buckets []int                   `json:"buckets"`
}

// PromoteCommitInput ends a round.
type PromoteCommitInput struct {
	Plan    *features.PromotionPlan `json:"plan"`
	Results []features.BucketResult `json:"results"`
}

// PromotePlan checks and plans a round of a promotion.
func (l *Lake) PromotePlan(ctx context.Context, in PromotePlanInput) (*features.PromotionPlan, error) {
	// The node's heartbeat timeout applies to each of its activities.
	ctx, stop := nodetype.StartKeepAlive(ctx)
	defer stop()
	var spec features.PromoteSpec
	cat, err := l.openWith(ctx, in.With, &spec)
	if err != nil {
		return nil, err
	}
	plan, err := features.PlanPromotion(ctx, cat, spec, in.ID)
	return plan, Error(err)
}

// PromoteBuckets writes one bucket group's files.
func (l *Lake) PromoteBuckets(ctx context.Context, in PromoteBucketsInput) (features.BucketResult, error) {
	cat, err := l.Open(ctx)
	if err != nil {
		return features.BucketResult{}, err
	}
	ctx, stop := nodetype.StartKeepAlive(ctx)
	defer stop()
	res, err := features.PromoteBuckets(ctx, cat, in.Plan, in.Buckets, l.Logger)
	return res, Error(err)
}

// PromoteCommit lands a round, or reports that it lost a race.
func (l *Lake) PromoteCommit(ctx context.Context, in PromoteCommitInput) (features.CommitResult, error) {
	cat, err := l.Open(ctx)
	if err != nil {
		return features.CommitResult{}, err
	}
	ctx, stop := nodetype.StartKeepAlive(ctx)
	defer stop()
	res, err := features.CommitPromotion(ctx, cat, in.Plan, in.Results, l.Logger)
	return res, Error(err)
}

// RollbackTableType is the `rollback_table` node type.
var RollbackTableType = dags.NodeType{
	Name: "rollback_table",
	Doc:  "Move a table's main branch to a snapshot (and its schema back), rewriting metadata only; the compensation of promote_features.",
	Fields: []dags.Field{
		{Name: "table", Type: dags.FieldString, Required: true, Doc: "namespace.table"},
		{Name: "to", Type: dags.FieldAny, Required: true, Doc: "snapshot id (a string: ids are 64-bit), e.g. ${nodes.promote.outputs.previous_snapshot_id}"},
	},
	Outputs: []string{"table", "from_snapshot_id", "to_snapshot_id", "ancestor", "schema_restored", "noop"},
	Check: func(with map[string]any) error {
		if v, ok := with["to"]; ok && !dags.HasRef(v) {
			if _, err := SnapshotID(v); err != nil {
				return fmt.Errorf("to: %w", err)
			}
		}
		return nil
	},
}

// SnapshotID reads a snapshot id given as a string or an exact integer.
func SnapshotID(v any) (int64, error) {
	switch x := v.(type) {
	case string:
		id, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not a snapshot id", x)
		}
		return id, nil
	case float64:
		if x != math.Trunc(x) || math.Abs(x) > 1<<53 {
			return 0, fmt.Errorf("%v cannot be an exact snapshot id as a number; pass it as a string", x)
		}
		return int64(x), nil
	case int:
		return int64(x), nil
	case int64:
		return x, nil
	default:
		return 0, fmt.Errorf("want a snapshot id, got %T", v)
	}
}

// Rollback runs a rollback_table node.
func (l *Lake) Rollback(ctx context.Context, in nodetype.Input) (map[string]any, error) {
	name, _ := in.With["table"].(string)
	if _, err := lake.Ident(name); err != nil {
		return nil, nodetype.Permanent(errtype.BadInput, "table: %v", err)
	}
	to, err := SnapshotID(in.With["to"])
	if err != nil {
		return nil, nodetype.Permanent(errtype.BadInput, "to: %v", err)
	}
	cat, err := l.Open(ctx)
	if err != nil {
		return nil, err
	}
	res, err := cat.Rollback(ctx, name, to)
	if err != nil {
		return nil, Error(err)
	}
	l.log(in).Info("rolled back", "table", name, "from", res.From, "to", res.To, "schema_restored", res.Schema)
	return map[string]any{
		"table": res.Table, "from_snapshot_id": strconv.FormatInt(res.From, 10), "to_snapshot_id": strconv.FormatInt(res.To, 10),
		"ancestor": res.Ancestor, "schema_restored": res.Schema, "noop": res.NoOp,
	}, nil
}

func (l *Lake) log(in nodetype.Input) *slog.Logger {
	return l.Logger.With("pipeline", in.Pipeline, "run", in.RunID, "node", in.Node)
}

// Deps are what the lake's node types need from the worker.
type Deps struct {
	// Catalog is the Iceberg catalog, opened on first use; nil on a worker
	// without one (the nodes then fail as bad input).
	Catalog *lake.Lazy
	Logger  *slog.Logger
}

// Types returns the node types that read and write the lake:
// stage_features, feature_stats, promote_features (a child workflow and
// its activities) and rollback_table.
func Types(d Deps) []nodetype.Type {
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	l := &Lake{Catalog: d.Catalog, Logger: d.Logger}
	return []nodetype.Type{
		{NodeType: StageFeaturesType, Run: l.Stage},
		{NodeType: FeatureStatsType, Run: l.Stats},
		{NodeType: PromoteFeaturesType, Workflow: PromoteFeatures, Activities: map[string]any{
			PromotePlanActivity:    l.PromotePlan,
			PromoteBucketsActivity: l.PromoteBuckets,
			PromoteCommitActivity:  l.PromoteCommit,
		}},
		{NodeType: RollbackTableType, Run: l.Rollback},
	}
}
