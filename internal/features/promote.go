package features

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/retrain-ml/retrain/internal/lake"
)

// PromoteSpec is a stage-2 job: promote the feature columns of staging
// tables into the training table for a date range.
type PromoteSpec struct {
	Training   string   `json:"training_table"`
	Staging    []string `json:"staging_tables"`
	StartDate  string   `json:"start_date"`
	EndDate    string   `json:"end_date"`
	DateColumn string   `json:"date_column,omitempty"`   // default "date"
	Groups     int      `json:"bucket_groups,omitempty"` // bucket activities; default one per bucket
}

// PromotionPlan is a checked promotion against one version of the training
// table (its base snapshot). It is small JSON: the Temporal workflow passes
// it to every bucket activity and to the commit. Everything a bucket
// activity writes is derived from it, and the commit lands only if the
// table is still at the base snapshot; otherwise the promotion is planned
// again on the fresh table.
type PromotionPlan struct {
	Spec             PromoteSpec     `json:"spec"`
	ID               string          `json:"promotion_id"` // recorded in the snapshot summary: the commit's idempotency key
	BaseSnapshot     int64           `json:"base_snapshot_id,string"`
	BaseSchema       int             `json:"base_schema_id"`
	StagingSnapshots []int64         `json:"staging_snapshot_ids"` // pinned: every bucket reads the same staging data
	TargetSchema     json.RawMessage `json:"target_schema"`        // training schema with the new columns
	Columns          []string        `json:"columns"`              // promoted columns
	NewColumns       []string        `json:"new_columns"`          // of which the training table lacks
	BucketColumn     string          `json:"bucket_column"`
	Groups           [][]int         `json:"groups"` // buckets per activity
	Rows             int64           `json:"rows"`   // training rows in the range
	Partitions       int             `json:"partitions"`
	PendingDir       string          `json:"pending_dir"`
	// Already is the snapshot of main's head when it holds exactly this
	// promotion already (alreadyPromoted): the plan has no groups, and the
	// commit commits nothing and reports that snapshot.
	Already int64 `json:"already_snapshot_id,string,omitempty"`
	// Inputs digests what the promotion reads (promotionInputs), recorded
	// in the commit's summary.
	Inputs string `json:"inputs,omitempty"`
}

// BucketResult is what one bucket activity wrote, by reference: the data
// files it wrote are listed in a small object at URI, never in the result.
type BucketResult struct {
	URI        string `json:"uri"`
	Buckets    []int  `json:"buckets"`
	Rows       int64  `json:"rows"`
	Matched    int64  `json:"matched"` // rows that got a value from some staging table
	Files      int    `json:"files"`
	Partitions int    `json:"partitions"`
	Stale      bool   `json:"stale,omitempty"` // the table moved past the plan's base: nothing written
	// JoinTime is the time spent reading the staging side and joining,
	// without reading the training rows or writing the result.
	JoinTime time.Duration `json:"join_time"`
}

// CommitResult is the outcome of a promotion commit.
type CommitResult struct {
	Conflict         bool  `json:"conflict,omitempty"` // the table moved: plan again
	CurrentSnapshot  int64 `json:"current_snapshot_id,string,omitempty"`
	PreviousSnapshot int64 `json:"previous_snapshot_id,string"`
	Snapshot         int64 `json:"snapshot_id,string"`
	Already          bool  `json:"already,omitempty"` // an earlier attempt had committed it
	// Rebased: another commit landed after the plan, on other partitions;
	// the files were committed on top of it as they were, none rewritten.
	// PreviousSnapshot is then that commit's snapshot, not the plan's base.
	Rebased  bool   `json:"rebased,omitempty"`
	Files    int    `json:"files"`
	Replaced int    `json:"replaced"`
	Reason   string `json:"reason,omitempty"`
}

// PromoteResult reports a whole promotion.
type PromoteResult struct {
	Training         string        `json:"training_table"`
	PreviousSnapshot int64         `json:"previous_snapshot_id,string"`
	Snapshot         int64         `json:"snapshot_id,string"`
	Rows             int64         `json:"rows"`
	Matched          int64         `json:"matched"`
	Columns          []string      `json:"columns"`
	Partitions       int           `json:"partitions"`
	Files            int           `json:"files"`
	Rounds           int           `json:"rounds"`
	Elapsed          time.Duration `json:"elapsed"`
	JoinTime         time.Duration `json:"join_time"` // summed over bucket groups
}

// MaxRounds bounds how often a promotion is redone after losing a race.
const MaxRounds = 5

// Promote runs a whole promotion in this process: plan, every bucket
// group (parallel up to workers), commit; and again from a fresh plan if
// another commit landed first. The Temporal workflow does the same with
// one activity per step.
func Promote(ctx context.Context, cat *lake.Catalog, spec PromoteSpec, id string, workers int, log *slog.Logger) (PromoteResult, error) {
	if log == nil {
		log = slog.Default()
	}
	started := time.Now()
	res := PromoteResult{Training: spec.Training}
	for round := 1; round <= MaxRounds; round++ {
		res.Rounds = round
		plan, err := PlanPromotion(ctx, cat, spec, id+"/"+strconv.Itoa(round))
		if err != nil {
			return res, err
		}
		results, err := runGroups(ctx, cat, plan, workers, log)
		if err != nil {
			return res, err
		}
		c, err := CommitPromotion(ctx, cat, plan, results, log)
		if err != nil {
			return res, err
		}
		if c.Conflict {
			log.Info("promote: another commit landed first; redoing the promotion on the fresh table", "table", spec.Training, "round", round, "reason", c.Reason)
			continue
		}
		res.PreviousSnapshot, res.Snapshot, res.Columns, res.Partitions, res.Files = c.PreviousSnapshot, c.Snapshot, plan.Columns, plan.Partitions, c.Files
		for _, r := range results {
			res.Rows += r.Rows
			res.Matched += r.Matched
			res.JoinTime += r.JoinTime
		}
		res.Elapsed = time.Since(started)
		return res, nil
	}
	return res, fmt.Errorf("promotion into %s lost the race %d times in a row", spec.Training, MaxRounds)
}

func runGroups(ctx context.Context, cat *lake.Catalog, plan *PromotionPlan, workers int, log *slog.Logger) ([]BucketResult, error) {
	workers = max(1, workers)
	results := make([]BucketResult, len(plan.Groups))
	errs := make([]error, len(plan.Groups))
	sem := make(chan struct{}, workers)
	done := make(chan struct{})
	for i, g := range plan.Groups {
		go func() {
			sem <- struct{}{}
			results[i], errs[i] = PromoteBuckets(ctx, cat, plan, g, log)
			<-sem
			done <- struct{}{}
		}()
	}
	for range plan.Groups {
		<-done
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return results, nil
}
