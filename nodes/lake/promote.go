package lake

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/retrain-ml/retrain/nodetype"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/features"
)

// PromoteFeatures runs a promote_features node: plan the promotion on the
// training table as it is, join bucket groups in parallel (one activity
// each, each writing data files without committing), then commit them in
// one snapshot. If another commit landed on the table in the meantime the
// commit changes nothing and says so, and the promotion is planned and run
// again on the fresh table. Only URIs and ids pass through here.
func PromoteFeatures(ctx workflow.Context, in nodetype.Input) (nodetype.Result, error) {
	started := workflow.Now(ctx)
	info := workflow.GetInfo(ctx)
	ctx = workflow.WithActivityOptions(ctx, promoteActivityOptions(in.Options))
	log := workflow.GetLogger(ctx)
	for round := 1; round <= features.MaxRounds; round++ {
		// The promotion id is the commit's idempotency key: unique to this
		// execution and round, stable across activity retries.
		id := fmt.Sprintf("%s/%s/%s/%d", in.RunID, in.Node, info.WorkflowExecution.RunID, round)
		var plan features.PromotionPlan
		if err := workflow.ExecuteActivity(summarized(ctx, fmt.Sprintf("plan (round %d)", round)), PromotePlanActivity, PromotePlanInput{With: in.With, ID: id}).Get(ctx, &plan); err != nil {
			return nodetype.Result{}, stepError("plan", err)
		}
		futures := make([]workflow.Future, len(plan.Groups))
		for i, g := range plan.Groups {
			futures[i] = workflow.ExecuteActivity(summarized(ctx, fmt.Sprintf("buckets %v", g)), PromoteBucketsActivity, PromoteBucketsInput{Plan: &plan, Buckets: g})
		}
		results := make([]features.BucketResult, len(plan.Groups))
		var firstErr error
		for i, f := range futures {
			if err := f.Get(ctx, &results[i]); err != nil && firstErr == nil {
				firstErr = stepError(fmt.Sprintf("buckets %v", plan.Groups[i]), err)
			}
		}
		if firstErr != nil {
			return nodetype.Result{}, firstErr
		}
		var commit features.CommitResult
		if err := workflow.ExecuteActivity(summarized(ctx, "commit"), PromoteCommitActivity, PromoteCommitInput{Plan: &plan, Results: results}).Get(ctx, &commit); err != nil {
			return nodetype.Result{}, stepError("commit", err)
		}
		if commit.Conflict {
			log.Info("promotion lost a race; redoing it on the fresh table", "round", round, "reason", commit.Reason)
			continue
		}
		var rows, matched int64
		for _, r := range results {
			rows += r.Rows
			matched += r.Matched
		}
		return nodetype.Result{
			Outputs: map[string]any{
				"previous_snapshot_id": fmt.Sprint(commit.PreviousSnapshot),
				"snapshot_id":          fmt.Sprint(commit.Snapshot),
				"rows":                 rows,
				"matched":              matched,
				"columns":              plan.Columns,
				"partitions":           plan.Partitions,
				"files":                commit.Files,
				"rounds":               round,
			},
			Attempt:   info.Attempt,
			StartedAt: started,
			EndedAt:   workflow.Now(ctx),
		}, nil
	}
	return nodetype.Result{}, temporal.NewApplicationError(
		fmt.Sprintf("promotion lost the race for the table %d times in a row", features.MaxRounds), errtype.PromotionContended)
}

// promoteActivityOptions runs the promotion's activities on the node's
// timeout, heartbeat and retry policy. A bad input or a failed check is
// never retried, whatever the policy says.
func promoteActivityOptions(o *nodetype.Options) workflow.ActivityOptions {
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
	return workflow.ActivityOptions{StartToCloseTimeout: o.Timeout, HeartbeatTimeout: o.Heartbeat, RetryPolicy: retry}
}

// summarized names an activity in the Web UI's timeline (user metadata,
// not compared on replay).
func summarized(ctx workflow.Context, summary string) workflow.Context {
	opts := workflow.GetActivityOptions(ctx)
	opts.Summary = summary
	return workflow.WithActivityOptions(ctx, opts)
}

// stepError reports a failed activity under the step's name, keeping its
// error type, retryability and retry delay, so a bad input fails the node
// for good, and the activity's error as the cause. The message states the
// type once (the cause's text repeats it).
func stepError(step string, err error) error {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return temporal.NewApplicationErrorWithOptions(step+": "+nodetype.MessageOf(appErr), appErr.Type(),
			temporal.ApplicationErrorOptions{NonRetryable: appErr.NonRetryable(), NextRetryDelay: appErr.NextRetryDelay(), Category: appErr.Category(), Cause: err})
	}
	return fmt.Errorf("%s: %w", step, err)
}
