package lake

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/internal/number"
	"github.com/retrain-ml/retrain/nodetype"
)

// Names of the promote_features workflow and the activities it runs; they
// are recorded in run histories and do not change.
const (
	PromotePlanActivity    = "PromoteFeaturesPlan"
	PromoteBucketsActivity = "PromoteFeaturesBuckets"
	PromoteCommitActivity  = "PromoteFeaturesCommit"
	PromoteWorkflow        = "PromoteFeatures"
)

// PromoteWith is a promote_features node's `with` block, which the plan
// activity decodes (see PromoteFeatures).
type PromoteWith struct {
	TrainingTable string   `json:"training_table" required:"true" doc:"namespace.table to promote into"`
	StagingTables []string `json:"staging_tables" required:"true" doc:"staging tables whose feature columns are promoted"`
	StartDate     string   `json:"start_date" required:"true" doc:"first date, YYYY-MM-DD"`
	EndDate       string   `json:"end_date" required:"true" doc:"last date, inclusive"`
	DateColumn    string   `json:"date_column" default:"date" doc:"date column"`
	BucketGroups  int      `json:"bucket_groups" doc:"activities to fan out to (default: one per bucket)"`
}

// spec is the promotion w asks for.
func (w PromoteWith) spec() features.PromoteSpec {
	return features.PromoteSpec{
		Training: w.TrainingTable, Staging: w.StagingTables, StartDate: w.StartDate, EndDate: w.EndDate,
		DateColumn: w.DateColumn, Groups: w.BucketGroups,
	}
}

// PromoteOutputs are a promote_features node's outputs.
type PromoteOutputs struct {
	// PreviousSnapshotID is the training table's snapshot before the
	// promotion: what rollback_table moves it back to. Ids are strings:
	// they are 64-bit.
	PreviousSnapshotID int64    `json:"previous_snapshot_id,string"`
	SnapshotID         int64    `json:"snapshot_id,string"`
	Rows               int64    `json:"rows"`
	Matched            int64    `json:"matched"` // rows that got a value from some staging table
	Columns            []string `json:"columns"` // promoted columns
	Partitions         int      `json:"partitions"`
	Files              int      `json:"files"`
	Rounds             int      `json:"rounds"`  // plans it took: a round lost to another commit is redone
	Summary            string   `json:"summary"` // one line for the run's node table
	// Queue says why the promotion went ahead without its turn in the
	// table's queue, on the commit's compare-and-swap; empty when it had
	// its turn.
	Queue string `json:"queue,omitempty"`
	// Already: main's head held exactly this promotion (the same staging
	// snapshots over the same range), so nothing was committed and
	// snapshot_id is that head; previous_snapshot_id is the same, so a
	// rollback of this run undoes nothing.
	Already bool `json:"already,omitempty"`
}

func (o PromoteOutputs) summary() string {
	s := fmt.Sprintf("promoted %d columns into %s rows (%d partitions, %d files): snapshot %d", len(o.Columns),
		number.Count(o.Rows), o.Partitions, o.Files, o.SnapshotID)
	if o.Rounds > 1 {
		s += fmt.Sprintf(", after %d rounds", o.Rounds)
	}
	if o.Queue != "" {
		s += "; " + o.Queue
	}
	return s
}

func (l *Lake) promoteType() nodetype.Type {
	t := nodetype.NewWorkflow[PromoteWith, PromoteOutputs](dags.NodeType{
		Name:  "promote_features",
		Doc:   "Stage 2 of a feature backfill: join staging tables into the training table bucket by bucket (one activity per bucket group, on any worker of the queue with a free group slot, --activity-concurrency; a dead worker's group moves to another after at most 30 s without a heartbeat, or the node's shorter heartbeat) and commit, exactly once, one snapshot replacing the affected partitions; redone if another commit lands first.",
		Check: CheckDates,
	}, PromoteWorkflow, PromoteFeatures, map[string]any{
		PromotePlanActivity:    l.PromotePlan,
		PromoteBucketsActivity: l.PromoteBuckets,
		PromoteCommitActivity:  l.PromoteCommit,
		// The table queue: its activity, and its workflow (registered by
		// the worker beside PromoteFeatures, see TableQueue).
		TableQueueEnqueueActivity: l.TableQueueEnqueue,
	})
	t.Bounded = []string{PromoteBucketsActivity}
	return t
}

// promoteGroupQueueChange versions where PromoteFeatures schedules its
// bucket groups: runs recorded before it scheduled them on the node's
// queue (bounded by a slot inside the activity), and replay keeps them so.
const promoteGroupQueueChange = "promote-group-queue"

// GroupContext schedules a workflow's bounded activity on its own queue
// below the workflow's (nodetype.BoundedQueue), where each worker runs as
// many at once as its --activity-concurrency allows.
func GroupContext(ctx workflow.Context, activity string) workflow.Context {
	opts := workflow.GetActivityOptions(ctx)
	opts.TaskQueue = nodetype.BoundedQueue(workflow.GetInfo(ctx).TaskQueueName, activity)
	return workflow.WithActivityOptions(ctx, opts)
}

// PromoteFeatures runs a promote_features node: plan the promotion on the
// training table as it is, join bucket groups in parallel (one activity
// each, each writing data files without committing), then commit them in
// one snapshot. If another commit landed on the table in the meantime the
// commit changes nothing and says so, and the promotion is planned and run
// again on the fresh table. Only URIs and ids pass through here.
//
// The workflow does not decode the `with` block: it passes it to the plan
// activity as it came, which decodes it as a PromoteWith and fails as bad
// input if it does not decode. Failing in the workflow instead would
// change the commands of recorded runs whose plan failed that way, and
// they would no longer replay.
func PromoteFeatures(ctx workflow.Context, in nodetype.Input) (nodetype.Result, error) {
	started := workflow.Now(ctx)
	info := workflow.GetInfo(ctx)
	ctx = workflow.WithActivityOptions(ctx, NodeActivityOptions(in.Options))
	log := workflow.GetLogger(ctx)
	queueNote := ""
	if workflow.GetVersion(ctx, promoteQueueChange, workflow.DefaultVersion, 1) >= 1 {
		// Overlapping promotions into the table take turns (tablequeue.go).
		release, note, err := waitTurn(ctx, in)
		if err != nil {
			return nodetype.Result{}, err
		}
		defer release()
		queueNote = note
	}
	groupCtx := ctx
	if workflow.GetVersion(ctx, promoteGroupQueueChange, workflow.DefaultVersion, 1) >= 1 {
		groupCtx = GroupContext(ctx, PromoteBucketsActivity)
	}
	for round := 1; round <= features.MaxRounds; round++ {
		// The promotion id is the commit's idempotency key: unique to this
		// execution and round, stable across activity retries.
		id := fmt.Sprintf("%s/%s/%s/%d", in.RunID, in.Node, info.WorkflowExecution.RunID, round)
		var plan features.PromotionPlan
		if err := workflow.ExecuteActivity(Summarized(ctx, fmt.Sprintf("plan (round %d)", round)), PromotePlanActivity, PromotePlanInput{With: in.With, ID: id}).Get(ctx, &plan); err != nil {
			return nodetype.Result{}, StepError("plan", err)
		}
		futures := make([]workflow.Future, len(plan.Groups))
		for i, g := range plan.Groups {
			futures[i] = workflow.ExecuteActivity(Summarized(groupCtx, fmt.Sprintf("buckets %v", g)), PromoteBucketsActivity, PromoteBucketsInput{Plan: &plan, Buckets: g})
		}
		results := make([]features.BucketResult, len(plan.Groups))
		var firstErr error
		for i, f := range futures {
			if err := f.Get(ctx, &results[i]); err != nil && firstErr == nil {
				firstErr = StepError(fmt.Sprintf("buckets %v", plan.Groups[i]), err)
			}
		}
		if firstErr != nil {
			return nodetype.Result{}, firstErr
		}
		var commit features.CommitResult
		if err := workflow.ExecuteActivity(Summarized(ctx, "commit"), PromoteCommitActivity, PromoteCommitInput{Plan: &plan, Results: results}).Get(ctx, &commit); err != nil {
			return nodetype.Result{}, StepError("commit", err)
		}
		if commit.Conflict {
			log.Info("promotion lost a race; redoing it on the fresh table", "round", round, "reason", commit.Reason)
			continue
		}
		if commit.Rebased {
			log.Info("promotion re-based on a commit to other partitions", "round", round, "on", commit.PreviousSnapshot)
		}
		out := PromoteOutputs{
			PreviousSnapshotID: commit.PreviousSnapshot, SnapshotID: commit.Snapshot,
			Columns: plan.Columns, Partitions: plan.Partitions, Files: commit.Files, Rounds: round, Queue: queueNote,
		}
		for _, r := range results {
			out.Rows += r.Rows
			out.Matched += r.Matched
		}
		out.Summary = out.summary()
		if plan.Already != 0 {
			// The table's main holds this very promotion (features.PlanPromotion).
			out.Already = true
			out.Summary = fmt.Sprintf("already in place: %s is at snapshot %d, which promoted these staging snapshots over this range; nothing committed", plan.Spec.Training, out.SnapshotID)
		}
		outputs, err := nodetype.Outputs(out)
		if err != nil {
			return nodetype.Result{}, fmt.Errorf("promote_features outputs: %w", err)
		}
		return nodetype.Result{
			Outputs:   outputs,
			Attempt:   info.Attempt,
			StartedAt: started,
			EndedAt:   workflow.Now(ctx),
		}, nil
	}
	return nodetype.Result{}, temporal.NewApplicationError(
		fmt.Sprintf("promotion lost the race for the table %d times in a row", features.MaxRounds), errtype.PromotionContended)
}

// NodeActivityOptions runs a child workflow node's activities (the
// promotion's, the split's) on the node's timeout, heartbeat (capped, see
// PromoteHeartbeat) and retry policy. A bad input or a failed check is
// never retried, whatever the policy says.
func NodeActivityOptions(o *nodetype.Options) workflow.ActivityOptions {
	never := []string{errtype.BadInput, errtype.CheckFailed}
	if o == nil {
		// A run started before the Pipeline workflow sent the node's
		// options: what its activities were scheduled with then.
		return workflow.ActivityOptions{
			StartToCloseTimeout: 2 * time.Hour,
			HeartbeatTimeout:    2 * time.Minute,
			RetryPolicy: &temporal.RetryPolicy{
				InitialInterval:        time.Second,
				BackoffCoefficient:     2,
				MaximumInterval:        time.Minute,
				MaximumAttempts:        5,
				NonRetryableErrorTypes: never,
			},
		}
	}
	retry := nodetype.RetryPolicy(o.Retry)
	retry.NonRetryableErrorTypes = append(slices.Clone(retry.NonRetryableErrorTypes), never...)
	return workflow.ActivityOptions{StartToCloseTimeout: o.Timeout, HeartbeatTimeout: promoteHeartbeat(o.Heartbeat), RetryPolicy: retry}
}

// PromoteHeartbeat is the longest heartbeat timeout of a promotion's
// activities: how long a group whose worker died (SIGKILL, OOM, a lost
// host) waits before Temporal hands it to another worker of the queue.
// It is 30 s, not less: the SDK sends heartbeats at most every 0.8 x the
// timeout, and on a saturated 2-core machine running the embedded server
// in the same process (retrain dev at 20M rows) a 10 s cap
// failed promote on heartbeat timeouts of live groups, three attempts. A node that wants a faster failover sets a shorter heartbeat.
const PromoteHeartbeat = 30 * time.Second

// promoteHeartbeat caps the node's heartbeat timeout at PromoteHeartbeat,
// and turns a disabled one (0) into PromoteHeartbeat. The activities
// heartbeat from a keep-alive goroutine (nodetype.StartKeepAlive), not
// from their progress: a heartbeat proves only that the worker process is
// alive, so a long timeout buys no tolerance for slow groups and only
// delays the retry of a dead worker's group; and with none at all such a
// group would wait out the node's whole timeout. A shorter timeout the
// node sets is kept.
func promoteHeartbeat(node time.Duration) time.Duration {
	if node <= 0 || node > PromoteHeartbeat {
		return PromoteHeartbeat
	}
	return node
}

// Summarized names an activity in the Web UI's timeline (user metadata,
// not compared on replay).
func Summarized(ctx workflow.Context, summary string) workflow.Context {
	opts := workflow.GetActivityOptions(ctx)
	opts.Summary = summary
	return workflow.WithActivityOptions(ctx, opts)
}

// StepError reports a failed activity under the step's name, keeping its
// error type, retryability and retry delay, so a bad input fails the node
// for good, and the activity's error as the cause. The message states the
// type once (the cause's text repeats it).
func StepError(step string, err error) error {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return temporal.NewApplicationErrorWithOptions(step+": "+nodetype.MessageOf(appErr), appErr.Type(),
			temporal.ApplicationErrorOptions{NonRetryable: appErr.NonRetryable(), NextRetryDelay: appErr.NextRetryDelay(), Category: appErr.Category(), Cause: err})
	}
	return fmt.Errorf("%s: %w", step, err)
}

// PromotePlanInput starts one round of a promotion.
type PromotePlanInput struct {
	With map[string]any `json:"with"` // the node's block, as the workflow got it
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
	w, err := nodetype.DecodeWith[PromoteWith](in.With)
	if err != nil {
		return nil, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	cat, err := l.Open(ctx)
	if err != nil {
		return nil, err
	}
	plan, err := features.PlanPromotion(ctx, cat, w.spec(), in.ID)
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
	if err := checkPlanLake(ctx, cat, in.Plan); err != nil {
		return features.BucketResult{}, err
	}
	res, err := features.PromoteBuckets(ctx, cat, in.Plan, in.Buckets, l.Logger)
	return res, Error(err)
}

// checkPlanLake checks that this worker's lake is the one the plan was
// made on: its training table knows the plan's base snapshot. Bucket
// groups and the commit run on whichever worker of the queue polls them
// first, and each opens the lake its own flags name. A worker configured
// with another lake would otherwise fail the node for good (its table is
// missing: bad input) or, holding a table of the same name (two dev
// stacks with the demo data), see it "moved" and make the promotion
// replan until it gives up as contended. The error is retryable: a retry
// may reach a worker that is configured right, and it names this worker's
// lake so the operator can see which one is not.
func checkPlanLake(ctx context.Context, cat *lake.Catalog, plan *features.PromotionPlan) error {
	if plan == nil {
		return nodetype.Permanent(errtype.BadInput, "no promotion plan given")
	}
	tbl, err := cat.Load(ctx, plan.Spec.Training)
	switch {
	case errors.Is(err, lake.ErrNoSuchTable):
		return fmt.Errorf("training table %s, on which the promotion was planned, is not in this worker's lake (%s): every worker of the task queue must use the same catalog and warehouse", plan.Spec.Training, cat.Config())
	case err != nil:
		return err
	case tbl.Metadata().SnapshotByID(plan.BaseSnapshot) == nil:
		return fmt.Errorf("training table %s in this worker's lake (%s) has no snapshot %d, on which the promotion was planned: every worker of the task queue must use the same catalog and warehouse", plan.Spec.Training, cat.Config(), plan.BaseSnapshot)
	}
	return nil
}

// PromoteCommit lands a round, or reports that it lost a race.
func (l *Lake) PromoteCommit(ctx context.Context, in PromoteCommitInput) (features.CommitResult, error) {
	cat, err := l.Open(ctx)
	if err != nil {
		return features.CommitResult{}, err
	}
	ctx, stop := nodetype.StartKeepAlive(ctx)
	defer stop()
	if err := checkPlanLake(ctx, cat, in.Plan); err != nil {
		return features.CommitResult{}, err
	}
	res, err := features.CommitPromotion(ctx, cat, in.Plan, in.Results, l.Logger)
	return res, Error(err)
}
