package split

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	lakenode "github.com/retrain-ml/retrain/activities/lake"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/dataset"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/nodetype"
)

// GroupResult is what one bucket group of a split wrote: its part of the
// checkpoint, by the key of the part's file list (however many files it
// wrote), and its counts, which the manifest adds up.
type GroupResult struct {
	Group     int                    `json:"group"`
	Buckets   []int                  `json:"buckets"`
	Part      string                 `json:"part"`
	Train     dataset.CoverageCounts `json:"train"`
	Eval      dataset.CoverageCounts `json:"eval"`
	TrainDays []int32                `json:"train_days"`
	EvalDays  []int32                `json:"eval_days"`
	Join      features.JoinStats     `json:"join"`
	S3        s3store.UsageFigures   `json:"s3"`
}

// errNoStoreHere fails a group or a manifest that reached a worker with no
// object store, retryably: the plan found one on its worker, and another
// worker of the queue may have it too.
var errNoStoreHere = errors.New("this worker has no object store for the split's checkpoint: every worker of the task queue must use the same store (--s3-uri)")

// group writes bucket group i of a planned split: its rows of both
// datasets, as one part of the plan's checkpoint attempt. A retried
// group writes a new part (checkpoint.NewPart draws its name), so what a
// dead attempt left is never read, and the manifest sweeps it.
func (s *Splits) group(ctx context.Context, plan *Plan, i int) (GroupResult, error) {
	if plan == nil || i < 0 || i >= len(plan.Groups) {
		return GroupResult{}, nodetype.Permanent(errtype.BadInput, "no bucket group %d in the split's plan", i)
	}
	log := s.Logger.With("pipeline", plan.Pipeline, "run", plan.Run, "node", plan.Node, "group", i, "buckets", plan.Groups[i])
	window, err := backfill.ParseDateRange(plan.With.StartDate, plan.With.EndDate)
	if err != nil {
		return GroupResult{}, nodetype.Permanent(errtype.BadInput, "the run's window: %v", err)
	}
	if s.Store == nil {
		return GroupResult{}, errNoStoreHere
	}
	ts, err := s.openPlanned(ctx, plan, window)
	if err != nil {
		return GroupResult{}, err
	}
	eval := map[int32]bool{}
	for _, d := range plan.Eval {
		eval[d] = true
	}
	p := splitPlan{with: plan.With, window: window, join: ts.join, joined: ts.joined, buckets: plan.Groups[i], bucketCol: plan.BucketColumn}
	cw, err := checkpoint.NewPart(ctx, s.Store, plan.key(), plan.Fingerprint, plan.Attempt, fmt.Sprintf("g%03d", i))
	if err != nil {
		return GroupResult{}, err
	}
	res, err := writeGroup(ctx, cw, ts, p, eval)
	if err != nil {
		cw.Discard(err)
		return GroupResult{}, splitError(err)
	}
	res.Group, res.Buckets = i, plan.Groups[i]
	log.Info("split group written", "train", res.Train.Rows, "eval", res.Eval.Rows, "part", res.Part)
	return res, nil
}

// writeGroup writes the rows p selects of ts into cw, eval the held-out
// dates, and closes it.
func writeGroup(ctx context.Context, cw *checkpoint.Writer, ts *tableSource, p splitPlan, eval map[int32]bool) (GroupResult, error) {
	sp, stats, err := splitRows(ctx, cw, ts, ts.schema, p, eval)
	if err != nil {
		return GroupResult{}, err
	}
	part, err := cw.ClosePart()
	if err != nil {
		return GroupResult{}, err
	}
	return GroupResult{
		Part: part, Train: sp.tally.train.Counts(), Eval: sp.tally.eval.Counts(),
		TrainDays: slices.Sorted(maps.Keys(sp.trainDays)), EvalDays: slices.Sorted(maps.Keys(sp.evalDays)), Join: *stats,
	}, nil
}

// openPlanned opens the plan's table as the plan read it. Groups run on
// whichever worker of the queue polls them first, and each opens the
// lake its own flags name: a worker whose lake lacks the table or the
// snapshot is misconfigured, and fails retryably (another worker may be
// configured right) with a message naming its lake, as promotion's groups
// do. The schema and the joined columns must be the plan's.
func (s *Splits) openPlanned(ctx context.Context, plan *Plan, window backfill.DateRange) (*tableSource, error) {
	lk := &lakenode.Lake{Catalog: s.Catalog, Logger: s.Logger}
	cat, err := lk.Open(ctx)
	if err != nil {
		return nil, err
	}
	tbl, err := cat.Load(ctx, plan.With.Table)
	switch {
	case errors.Is(err, lake.ErrNoSuchTable):
		return nil, fmt.Errorf("table %s, on which the split was planned, is not in this worker's lake (%s): every worker of the task queue must use the same catalog and warehouse", plan.With.Table, cat.Config())
	case err != nil:
		return nil, err
	case tbl.Metadata().SnapshotByID(plan.Snapshot) == nil:
		return nil, fmt.Errorf("table %s in this worker's lake (%s) has no snapshot %d, on which the split was planned: every worker of the task queue must use the same catalog and warehouse", plan.With.Table, cat.Config(), plan.Snapshot)
	}
	ts, err := s.openTable(ctx, plan.With, window, dataset.Limits{})
	if err != nil {
		return nil, err
	}
	ts.keepNeeded()
	var joined []features.JoinedColumn
	if ts.join != nil {
		joined = ts.join.Columns()
	}
	if !sameJSON(ts.schema, plan.Schema) || !sameJSON(joined, plan.Joined) || ts.snap != plan.Snapshot {
		return nil, fmt.Errorf("table %s at snapshot %d reads otherwise in this worker's lake (%s) than where the split was planned (its schema or joined columns differ): every worker of the task queue must use the same catalog and warehouse",
			plan.With.Table, plan.Snapshot, cat.Config())
	}
	return ts, nil
}

// sameJSON reports whether a and b encode to the same JSON: how the plan
// carried them.
func sameJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}
