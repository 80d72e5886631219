package split

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/activities/internal/objects"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/dataset"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/nodetype"
)

// Plan is a checked split of a table: what its bucket groups and its
// manifest work from, on whichever workers take them. It is small JSON,
// recorded in the node's history: no rows pass through Temporal.
type Plan struct {
	// Pipeline, Run and Node name the checkpoint (checkpoint.Key).
	Pipeline string `json:"pipeline"`
	Run      string `json:"run"`
	Node     string `json:"node"`
	// With is the node's block, decoded, with the snapshots the plan
	// read pinned (the table's and each staging table's), so every group
	// reads the same data whatever lands meanwhile.
	With        With   `json:"with"`
	Fingerprint string `json:"fingerprint"`
	// Attempt is the folder of the checkpoint the groups write under.
	Attempt  string         `json:"attempt"`
	Snapshot int64          `json:"snapshot_id,string"`
	Schema   dataset.Schema `json:"schema"`
	// Eval are the held-out dates, as day numbers.
	Eval []int32 `json:"eval_days"`
	// BucketColumn is the column of the table's bucket partition, Groups
	// the buckets each group reads; with no bucket partition, one group
	// reads the whole window (Groups is [null]).
	BucketColumn string                  `json:"bucket_column,omitempty"`
	Groups       [][]int                 `json:"groups"`
	Joined       []features.JoinedColumn `json:"joined,omitempty"`
	JoinSummary  string                  `json:"join_summary,omitempty"`
	// Done holds the split's outputs when the plan finished it: its
	// checkpoint was there already, or it is a split of files, which one
	// activity writes whole. No group runs then.
	Done *Outputs `json:"done,omitempty"`
	// S3 is the plan step's own S3 use (see manifestStep).
	S3 s3store.UsageFigures `json:"s3"`
}

func (p *Plan) key() checkpoint.Key {
	return checkpoint.Key{Pipeline: p.Pipeline, Run: p.Run, Node: p.Node}
}

// prepared is a split's checked inputs and opened source.
type prepared struct {
	src         rowSource
	schema      dataset.Schema
	p           splitPlan
	pinned      With // the block with the snapshots read pinned (a table's)
	fingerprint string
	key         checkpoint.Key
	log         *slog.Logger
}

// prepare checks a split's inputs and opens its source. Everything wrong
// with the inputs that can be known without reading rows fails here as
// BadInput, before anything is written.
func (s *Splits) prepare(ctx context.Context, in nodetype.Input, w With) (*prepared, error) {
	window, err := backfill.ParseDateRange(w.StartDate, w.EndDate)
	if err != nil {
		return nil, nodetype.Permanent(errtype.BadInput, "the run's window: %v", err)
	}
	p := splitPlan{with: w, window: window}
	if w.EvalFrom != "" {
		d, err := backfill.ParseDay(w.EvalFrom)
		if err != nil {
			return nil, nodetype.Permanent(errtype.BadInput, "eval_from: %v", err)
		}
		if !window.Contains(d) {
			return nil, nodetype.Permanent(errtype.BadInput, "eval_from %s is outside the window %s: held-out dates must be inside it", w.EvalFrom, window)
		}
		p.from, p.hasFrom = d, true
	}
	if p.limits, err = limitsOf(w); err != nil {
		return nil, err
	}
	if s.Store == nil {
		return nil, objects.NoStore()
	}
	patterns, err := filePatterns(w.Files)
	if err != nil {
		return nil, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	pr := &prepared{p: p, pinned: w}
	inputs := map[string]any{"with": in.With}
	switch {
	case w.Table != "" && len(patterns) > 0:
		return nil, nodetype.Permanent(errtype.BadInput, "give table (an Iceberg table) or files (Parquet files), not both")
	case len(patterns) > 0:
		loc, err := splitZone(w, in.Timezone)
		if err != nil {
			return nil, nodetype.Permanent(errtype.BadInput, "%v", err)
		}
		fs, err := s.openFiles(ctx, patterns, w, loc, window)
		if err != nil {
			return nil, err
		}
		if fs.join, err = s.planFilesJoin(ctx, w, fs); err != nil {
			return nil, filesError(err)
		}
		want := fs.want
		if fs.join != nil {
			want = arrow.NewSchema(append(slices.Clone(want.Fields()), fs.join.fields()...), nil)
			var sides [][]sourceFile
			for _, side := range fs.join.sides {
				sides = append(sides, side.src.files)
			}
			inputs["join_files"] = sides
		}
		if pr.schema, err = dataset.Infer(want, w.Label, w.DateColumn, w.RequestID, w.Dense, w.Sparse, w.Slice); err != nil {
			return nil, nodetype.Permanent(errtype.BadInput, "files %s: %v", fs.files[0].Name, err)
		}
		// A changed or added file in the window redoes the split, and
		// so does another zone (the run's, when the split names none).
		inputs["files"] = fs.files
		inputs["timezone"] = loc.String()
		pr.src = fs
	case w.Table == "":
		return nil, nodetype.Permanent(errtype.BadInput, "give table (namespace.table of the training data) or files (Parquet files by glob, local or s3://)")
	default:
		ts, err := s.openTable(ctx, w, window, p.limits)
		if err != nil {
			return nil, err
		}
		pr.src, pr.schema = ts, ts.schema
		// The snapshot actually read, so that a split of the current
		// snapshot is redone once it moves.
		inputs["snapshot"] = ts.snap
		if ts.join != nil {
			inputs["joined"] = ts.join.Columns() // with the staging snapshots read
		}
		pr.pinned = pin(w, ts)
	}
	if err := pr.p.limits.Check(pr.schema); err != nil {
		return nil, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	if ts, ok := pr.src.(*tableSource); ok {
		ts.keepNeeded()
		pr.p.join, pr.p.joined = ts.join, ts.joined
	}
	if pr.fingerprint, err = checkpoint.Fingerprint(inputs); err != nil {
		return nil, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	pr.key = checkpoint.Key{Pipeline: in.Pipeline, Run: in.RunID, Node: in.Node}
	pr.log = s.Logger.With("pipeline", in.Pipeline, "run", in.RunID, "node", in.Node, "source", pr.src.name())
	return pr, nil
}

// limitsOf reads the null-rate limits of w.
func limitsOf(w With) (dataset.Limits, error) {
	limits := dataset.Limits{Default: w.MaxNullRate}
	var err error
	if limits.PerFeature, err = nullRateOverrides(w.MaxNullRates); err == nil {
		err = limits.CheckRates()
	}
	if err != nil {
		return limits, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	return limits, nil
}

// pin returns w with the snapshots ts read: the table's and, before the
// join drops the staging tables whose columns are not used, each staging
// table's (Sides[i] is Join[i] then).
func pin(w With, ts *tableSource) With {
	w.SnapshotID = strconv.FormatInt(ts.snap, 10)
	w.Join = slices.Clone(w.Join)
	if ts.join != nil {
		for i, side := range ts.join.Sides {
			if side.Snapshot != 0 {
				w.Join[i].SnapshotID = strconv.FormatInt(side.Snapshot, 10)
			}
		}
	}
	return w
}

// keepNeeded drops the staging columns the split does not use: only they
// are read and recorded.
func (t *tableSource) keepNeeded() {
	if t.join == nil {
		return
	}
	t.join.Keep(t.schema.TableColumns())
	t.joined = t.joined[:0]
	for _, c := range t.join.Columns() {
		t.joined = append(t.joined, c.Name)
	}
	if len(t.join.Sides) == 0 {
		t.join = nil
	}
}

// plan checks a split and plans it: its checkpoint reused if there is
// one, a split of files written whole, or a table's held-out dates and
// bucket groups.
func (s *Splits) plan(ctx context.Context, in nodetype.Input) (*Plan, error) {
	w, err := nodetype.DecodeWith[With](in.With)
	if err != nil {
		return nil, nodetype.Permanent(errtype.BadInput, "node %s (type %s): %v", in.Node, in.Type, err)
	}
	pr, err := s.prepare(ctx, in, w)
	if err != nil {
		return nil, err
	}
	plan := &Plan{Pipeline: in.Pipeline, Run: in.RunID, Node: in.Node, With: pr.pinned, Fingerprint: pr.fingerprint, Schema: pr.schema}
	ts, ok := pr.src.(*tableSource)
	if !ok {
		out, err := s.writeWhole(ctx, pr)
		plan.Done = &out
		return plan, err
	}
	rec, hit, err := checkpoint.Lookup[Record](ctx, s.Store, pr.key, pr.fingerprint)
	if err != nil {
		return nil, err
	}
	if hit {
		out := outputsOf(rec, pr.fingerprint, true)
		pr.log.Info("split ready", "window", out.Window.String(), "train_rows", out.TrainRows, "eval_rows", out.EvalRows, "reused", true)
		plan.Done = &out
		return plan, nil
	}
	eval, err := heldOut(ctx, ts, pr.schema, pr.p)
	if err != nil {
		return nil, splitError(err)
	}
	plan.Eval = slices.Sorted(maps.Keys(eval))
	plan.Snapshot = ts.snap
	if plan.BucketColumn, plan.Groups, err = groupBuckets(ctx, ts, pr.p, w.BucketGroups); err != nil {
		return nil, lakeError(err)
	}
	if ts.join != nil {
		plan.Joined, plan.JoinSummary = ts.join.Columns(), ts.join.Summary()
	}
	plan.Attempt = checkpoint.NewAttempt()
	pr.log.Info("split planned", "groups", len(plan.Groups), "bucket_column", plan.BucketColumn, "eval_days", len(plan.Eval), "attempt", plan.Attempt)
	return plan, nil
}

// groupBuckets groups the buckets of the table's partitions in the window
// into at most n groups (n <= 0: as many as it can), balanced by rows.
// Buckets that read the same staging partitions (b mod the join's
// BucketPeriod) go to the same group, so each staging partition is read
// once. A table without a bucket partition is one group.
func groupBuckets(ctx context.Context, ts *tableSource, p splitPlan, n int) (string, [][]int, error) {
	var col string
	var period int
	if p.join != nil {
		col, period = p.join.BucketColumn(), p.join.BucketPeriod()
	} else {
		fields, err := lake.SpecFields(ts.tbl.Schema(), ts.tbl.Spec())
		if err != nil {
			return "", nil, err
		}
		var ok bool
		if col, period, ok = lake.BucketSpec(fields); !ok {
			return "", [][]int{nil}, nil
		}
	}
	scan := lake.Scan(ctx, ts.tbl, table.WithSnapshotID(ts.snap), inWindow(ts.schema.Date, p.window))
	parts, err := lake.PlanPartitions(ctx, ts.tbl, scan)
	if err != nil {
		return "", nil, fmt.Errorf("plan the partitions of %s: %w", ts.table, err)
	}
	classRows := map[int]int64{}
	var buckets []int
	for _, part := range parts {
		b, ok := part.Values[col]
		if !ok {
			return "", nil, fmt.Errorf("partition %s of %s has no value of bucket column %s", part.Key, ts.table, col)
		}
		classRows[int(b)%period] += part.Rows
		if !slices.Contains(buckets, int(b)) {
			buckets = append(buckets, int(b))
		}
	}
	if len(buckets) == 0 {
		return "", [][]int{nil}, nil
	}
	if n <= 0 {
		n = len(classRows)
	}
	slices.Sort(buckets)
	var groups [][]int
	for _, classes := range backfill.GroupBuckets(classRows, n) {
		var g []int
		for _, b := range buckets {
			if slices.Contains(classes, b%period) {
				g = append(g, b)
			}
		}
		groups = append(groups, g)
	}
	return col, groups, nil
}

// writeWhole makes the whole split in one pass in this process (a split of
// files), or reuses its checkpoint.
func (s *Splits) writeWhole(ctx context.Context, pr *prepared) (Outputs, error) {
	out, hit, err := checkpoint.Do(ctx, s.Store, pr.key, pr.fingerprint, func(ctx context.Context, cw *checkpoint.Writer) (Record, error) {
		return s.write(ctx, cw, pr.src, pr.schema, pr.p, pr.log)
	})
	if err != nil {
		return Outputs{}, splitError(err)
	}
	o := outputsOf(out, pr.fingerprint, hit)
	pr.log.Info("split ready", "window", o.Window.String(), "train_rows", o.TrainRows, "eval_rows", o.EvalRows,
		"eval_dates", o.EvalDates, "reused", hit)
	return o, nil
}

// splitError maps a split's error kinds to Temporal error types: the data
// cannot be split (BadInput), or its coverage check failed (CheckFailed),
// neither retried.
func splitError(err error) error {
	switch {
	case errors.Is(err, errSplitInput):
		return nodetype.Permanent(errtype.BadInput, "%v", err)
	case errors.Is(err, errSplitCoverage):
		return nodetype.Permanent(errtype.CheckFailed, "%v", err)
	case features.IsBadInput(err):
		return nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	return err
}

// lakeError is splitError for errors of the lake (a missing table or
// snapshot is bad input).
func lakeError(err error) error {
	if errors.Is(err, lake.ErrNoSuchTable) || errors.Is(err, lake.ErrNoSuchSnapshot) {
		return nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	return splitError(err)
}

// outputsOf is a split's outputs from its record.
func outputsOf(out Record, fingerprint string, reused bool) Outputs {
	out.Fingerprint = fingerprint
	return Outputs{
		URI: out.URI, Manifest: out.Manifest, TrainRows: out.TrainRows, EvalRows: out.EvalRows,
		Window: out.Window, TrainDates: out.TrainDates, EvalDates: out.EvalDates, Coverage: out.Coverage.Features,
		SnapshotID: out.SnapshotID, Schema: out.Schema, Fingerprint: out.Fingerprint, Reused: reused,
		Joined: out.Joined, Files: out.Files, Timezone: out.Timezone, Summary: out.summary(),
	}
}
