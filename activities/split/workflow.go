package split

import (
	"context"
	"fmt"
	"runtime"
	"strconv"

	"go.temporal.io/sdk/workflow"
	"golang.org/x/sync/errgroup"

	lakenode "github.com/retrain-ml/retrain/activities/lake"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/nodetype"
)

// Names of the split workflow and the activities it runs; they are
// recorded in run histories and do not change.
const (
	SplitWorkflow         = "Split"
	SplitPlanActivity     = "SplitPlan"
	SplitGroupActivity    = "SplitGroup"
	SplitManifestActivity = "SplitManifest"
	// LegacyActivity is the activity split nodes ran as before the split
	// fanned out. Runs resolved by a worker from then schedule it still
	// (their plan says so), so it stays registered: it runs the whole
	// split in one process (Run).
	LegacyActivity = "split"
)

// GroupInput is one bucket group of a planned split.
type GroupInput struct {
	Plan  *Plan `json:"plan"`
	Group int   `json:"group"`
}

// ManifestInput ends a split: the plan and every group's result, in the
// plan's order.
type ManifestInput struct {
	Plan    *Plan         `json:"plan"`
	Results []GroupResult `json:"results"`
}

// Type is the split node type, run by s: a child workflow (Split) of a
// plan, bucket groups and a manifest. Its Run makes the same split in
// this process, one step after another, for code that runs a node
// without Temporal (benchmarks, tests).
func (s *Splits) Type() nodetype.Type {
	t := nodetype.NewWorkflow[With, Outputs](dags.NodeType{Name: "split", Doc: doc, Check: checkSplit}, SplitWorkflow, Split, map[string]any{
		SplitPlanActivity:     s.SplitPlan,
		SplitGroupActivity:    s.SplitGroup,
		SplitManifestActivity: s.SplitManifest,
		LegacyActivity:        nodetype.Activity(s.Run),
	})
	t.Bounded = []string{SplitGroupActivity}
	t.Run = s.Run
	return t
}

// Split runs a split node: plan it, write its bucket groups in parallel
// (one activity each, on the queue's bounded group queue, so any worker
// with a free group slot takes one), then check the coverage and write
// the manifest. Only URIs, keys and counts pass through here.
//
// The workflow does not decode the `with` block: the plan activity does,
// and fails as bad input if it does not decode.
func Split(ctx workflow.Context, in nodetype.Input) (nodetype.Result, error) {
	started := workflow.Now(ctx)
	info := workflow.GetInfo(ctx)
	ctx = workflow.WithActivityOptions(ctx, lakenode.NodeActivityOptions(in.Options))
	var plan Plan
	if err := workflow.ExecuteActivity(lakenode.Summarized(ctx, "plan"), SplitPlanActivity, in).Get(ctx, &plan); err != nil {
		return nodetype.Result{}, lakenode.StepError("plan", err)
	}
	out := plan.Done
	if out == nil {
		gctx := lakenode.GroupContext(ctx, SplitGroupActivity)
		futures := make([]workflow.Future, len(plan.Groups))
		for i, g := range plan.Groups {
			futures[i] = workflow.ExecuteActivity(lakenode.Summarized(gctx, groupName(g)), SplitGroupActivity, GroupInput{Plan: &plan, Group: i})
		}
		results := make([]GroupResult, len(plan.Groups))
		var firstErr error
		for i, f := range futures {
			if err := f.Get(ctx, &results[i]); err != nil && firstErr == nil {
				firstErr = lakenode.StepError(groupName(plan.Groups[i]), err)
			}
		}
		if firstErr != nil {
			return nodetype.Result{}, firstErr
		}
		out = new(Outputs)
		if err := workflow.ExecuteActivity(lakenode.Summarized(ctx, "manifest"), SplitManifestActivity, ManifestInput{Plan: &plan, Results: results}).Get(ctx, out); err != nil {
			return nodetype.Result{}, lakenode.StepError("manifest", err)
		}
	}
	outputs, err := nodetype.Outputs(*out)
	if err != nil {
		return nodetype.Result{}, fmt.Errorf("split outputs: %w", err)
	}
	return nodetype.Result{Outputs: outputs, Attempt: info.Attempt, StartedAt: started, EndedAt: workflow.Now(ctx)}, nil
}

func groupName(buckets []int) string {
	if buckets == nil {
		return "rows"
	}
	return fmt.Sprintf("buckets %v", buckets)
}

// SplitPlan checks and plans a split (see Plan).
func (s *Splits) SplitPlan(ctx context.Context, in nodetype.Input) (*Plan, error) {
	// The node's heartbeat timeout applies to each of its activities.
	ctx, stop := nodetype.StartKeepAlive(ctx)
	defer stop()
	return s.planStep(ctx, in)
}

// SplitGroup writes one bucket group of a split.
func (s *Splits) SplitGroup(ctx context.Context, in GroupInput) (GroupResult, error) {
	ctx, stop := nodetype.StartKeepAlive(ctx)
	defer stop()
	return s.groupStep(ctx, in.Plan, in.Group)
}

// SplitManifest checks a split's coverage and commits its checkpoint.
func (s *Splits) SplitManifest(ctx context.Context, in ManifestInput) (Outputs, error) {
	ctx, stop := nodetype.StartKeepAlive(ctx)
	defer stop()
	return s.manifestStep(ctx, in.Plan, in.Results)
}

// Run runs one attempt of a split node in this process: the plan, the
// bucket groups, GOMAXPROCS at once (as many as a worker runs by
// default), and the manifest: the steps the Split workflow runs as
// activities.
func (s *Splits) Run(ctx context.Context, in nodetype.Input) (map[string]any, error) {
	plan, err := s.planStep(ctx, in)
	if err != nil {
		return nil, err
	}
	out := plan.Done
	if out == nil {
		results := make([]GroupResult, len(plan.Groups))
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(runtime.GOMAXPROCS(0))
		for i := range plan.Groups {
			g.Go(func() error {
				var err error
				results[i], err = s.groupStep(gctx, plan, i)
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return nil, err
		}
		o, err := s.manifestStep(ctx, plan, results)
		if err != nil {
			return nil, err
		}
		out = &o
	}
	return nodetype.Outputs(*out)
}

// manifest adds up the groups' counts, checks the split's coverage and
// commits its checkpoint: the groups' parts, in the plan's order, under
// one manifest. A split that fails its checks commits nothing, and its
// groups' files are deleted.
func (s *Splits) manifest(ctx context.Context, plan *Plan, results []GroupResult) (Outputs, error) {
	if plan == nil || plan.Done != nil || len(results) != len(plan.Groups) {
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "the split's manifest needs its plan and a result for each of its groups")
	}
	if s.Store == nil {
		return Outputs{}, errNoStoreHere
	}
	log := s.Logger.With("pipeline", plan.Pipeline, "run", plan.Run, "node", plan.Node, "source", "table "+plan.With.Table)
	window, err := backfill.ParseDateRange(plan.With.StartDate, plan.With.EndDate)
	if err != nil {
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "the run's window: %v", err)
	}
	limits, err := limitsOf(plan.With)
	if err != nil {
		return Outputs{}, err
	}
	t := newTally(plan.Schema)
	var stats features.JoinStats
	parts := make([]string, len(results))
	for i, r := range results {
		if err := t.train.Merge(r.Train); err != nil {
			return Outputs{}, fmt.Errorf("group %d: train: %w", i, err)
		}
		if err := t.eval.Merge(r.Eval); err != nil {
			return Outputs{}, fmt.Errorf("group %d: eval: %w", i, err)
		}
		for _, d := range r.TrainDays {
			t.trainDays[d] = true
		}
		for _, d := range r.EvalDays {
			t.evalDays[d] = true
		}
		parts[i] = r.Part
		stats.Partitions += r.Join.Partitions
		stats.StagingReads += r.Join.StagingReads
		stats.Rows += r.Join.Rows
		stats.Matched += r.Join.Matched
		stats.MaxStagingRows = max(stats.MaxStagingRows, r.Join.MaxStagingRows)
	}
	if plan.JoinSummary != "" {
		log.Info("split joined staging tables", "how", plan.JoinSummary, "groups", len(results), "partitions", stats.Partitions,
			"staging_reads", stats.StagingReads, "matched", stats.Matched, "rows", stats.Rows, "max_staging_rows", stats.MaxStagingRows)
	}
	key := plan.key()
	p := splitPlan{with: plan.With, window: window, limits: limits}
	rec, err := s.finish(log, "table "+plan.With.Table, checkpoint.ManifestKey(key, plan.Fingerprint), plan.Schema, p, &t, func(r *Record) {
		r.SnapshotID = strconv.FormatInt(plan.Snapshot, 10)
		r.Joined, r.JoinSummary = plan.Joined, plan.JoinSummary
	})
	if err != nil {
		checkpoint.DiscardAttempt(ctx, s.Store, key, plan.Fingerprint, plan.Attempt)
		return Outputs{}, splitError(err)
	}
	out, hit, err := checkpoint.Commit(ctx, s.Store, key, plan.Fingerprint, plan.Attempt, parts, rec)
	if err != nil {
		return Outputs{}, err
	}
	o := outputsOf(out, plan.Fingerprint, hit)
	log.Info("split ready", "window", o.Window.String(), "train_rows", o.TrainRows, "eval_rows", o.EvalRows,
		"eval_dates", o.EvalDates, "groups", len(results), "reused", hit)
	return o, nil
}
