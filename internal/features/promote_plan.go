package features

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/lake"
)

var unsafeID = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// PlanPromotion checks a promotion and plans it on the training table as
// it is now. Bad input (a missing table, a staging table partitioned
// differently, a key column of another type, an empty date range) is
// reported here, before anything is written. id identifies this attempt
// at the promotion (for example run/node/round) and must be unique to it.
func PlanPromotion(ctx context.Context, cat *lake.Catalog, spec PromoteSpec, id string) (*PromotionPlan, error) {
	if spec.DateColumn == "" {
		spec.DateColumn = "date"
	}
	if id == "" {
		return nil, fmt.Errorf("promotion id is empty")
	}
	rng, err := backfill.ParseDateRange(spec.StartDate, spec.EndDate)
	if err != nil {
		return nil, badInput("%v", err)
	}
	training, err := loadInput(ctx, cat, "training table", spec.Training)
	if err != nil {
		return nil, err
	}
	if len(spec.Staging) == 0 {
		return nil, badInput("no staging tables given")
	}
	// Before the checks: a table that holds the promotion already has its
	// columns, which a promotion of a list feature would refuse.
	already, inputs, ok, err := alreadyPromoted(ctx, cat, training, spec)
	if err != nil {
		return nil, err
	}
	if ok {
		return &PromotionPlan{Spec: spec, ID: id, BaseSnapshot: already, Already: already, Inputs: inputs}, nil
	}
	staging, stagingChecked, checked, err := checkPromotion(ctx, cat, training, spec)
	if err != nil {
		return nil, err
	}
	plan := &PromotionPlan{Spec: spec, ID: id}
	for _, st := range staging {
		var snap int64
		if s := st.CurrentSnapshot(); s != nil {
			snap = s.SnapshotID
		}
		plan.StagingSnapshots = append(plan.StagingSnapshots, snap)
	}
	plan.Inputs = promotionInputs(spec, plan.StagingSnapshots)
	if err := checkDateColumn(training, spec.Training, spec.DateColumn); err != nil {
		return nil, err
	}
	cur := training.CurrentSnapshot()
	if cur == nil {
		return nil, badInput("training table %s has no data", spec.Training)
	}
	plan.BaseSnapshot, plan.BaseSchema = cur.SnapshotID, training.Schema().ID
	plan.BucketColumn = checked.BucketColumn
	for _, c := range checked.Columns {
		plan.Columns = append(plan.Columns, c.Name)
		if !c.Existing {
			plan.NewColumns = append(plan.NewColumns, c.Name)
		}
	}
	target, err := targetTable(training, stagingChecked, checked)
	if err != nil {
		return nil, err
	}
	if plan.TargetSchema, err = json.Marshal(target.Schema()); err != nil {
		return nil, err
	}

	parts, err := lake.PlanPartitions(ctx, training, training.Scan(table.WithRowFilter(lake.DateRange(spec.DateColumn, int32(rng.Start), int32(rng.End)))))
	if err != nil {
		return nil, err
	}
	rows := map[int]int64{}
	for _, p := range parts {
		b, ok := p.Values[checked.BucketColumn]
		if !ok {
			return nil, fmt.Errorf("partition %s has no bucket value", p.Key)
		}
		rows[int(b)] += p.Rows
		plan.Rows += p.Rows
	}
	if plan.Rows == 0 {
		return nil, badInput("training table %s has no rows between %s and %s", spec.Training, rng.Start, rng.End)
	}
	plan.Partitions = len(parts)
	groups := spec.Groups
	if groups <= 0 {
		groups = checked.Buckets
	}
	plan.Groups = backfill.GroupBuckets(rows, groups)
	plan.PendingDir = strings.TrimRight(training.Location(), "/") + "/metadata/retrain-promotions/" + unsafeID.ReplaceAllString(id, "_")
	return plan, nil
}

// checkPromotion loads a promotion's staging tables and checks them
// against the training table as it is now: the staging tables, their
// description for the schema change, and the checked columns.
func checkPromotion(ctx context.Context, cat *lake.Catalog, training *table.Table, spec PromoteSpec) ([]*table.Table, []backfill.Staging, backfill.PromotePlan, error) {
	trainSpec, _, err := specOf(training)
	if err != nil {
		return nil, nil, backfill.PromotePlan{}, err
	}
	check := backfill.PromoteCheck{
		Training: spec.Training, TrainingSchema: training.Schema(), TrainingSpec: trainSpec,
		Promoted: splitList(training.Properties()[PropPromoted]),
	}
	var tables []*table.Table
	for _, name := range spec.Staging {
		if name == spec.Training {
			return nil, nil, backfill.PromotePlan{}, badInput("staging table %s is the training table", name)
		}
		st, err := loadInput(ctx, cat, "staging table", name)
		if err != nil {
			return nil, nil, backfill.PromotePlan{}, err
		}
		sspec, _, err := specOf(st)
		if err != nil {
			return nil, nil, backfill.PromotePlan{}, err
		}
		tables = append(tables, st)
		check.Staging = append(check.Staging, backfill.Staging{Name: name, Schema: st.Schema(), Spec: sspec})
	}
	checked, err := check.Check()
	if err != nil {
		return nil, nil, backfill.PromotePlan{}, badInput("%v", err)
	}
	return tables, check.Staging, checked, nil
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// targetTable stages the schema change of a promotion on a new
// transaction of tbl and returns the staged table. For the same table version and
// columns it assigns the same field ids, which is what lets bucket
// activities and the commit agree on the schema without shipping it.
func targetTable(tbl *table.Table, staging []backfill.Staging, checked backfill.PromotePlan) (*table.StagedTable, error) {
	tx := tbl.NewTransaction()
	if err := stageSchema(tx, staging, checked); err != nil {
		return nil, err
	}
	staged, err := tx.StagedTable()
	if err != nil {
		return nil, fmt.Errorf("stage schema of %s: %w", lake.Name(tbl.Identifier()), err)
	}
	return staged, nil
}

func stageSchema(tx *table.Transaction, staging []backfill.Staging, checked backfill.PromotePlan) error {
	var adds []backfill.PromoteColumn
	for _, c := range checked.Columns {
		if !c.Existing {
			adds = append(adds, c)
		}
	}
	if len(adds) == 0 {
		return nil
	}
	us := tx.UpdateSchema(true, false)
	for _, c := range adds {
		f, _ := staging[c.Staging].Schema.FindFieldByName(c.Name)
		us = us.AddColumn([]string{c.Name}, c.Type, f.Doc, false, nil)
	}
	if err := us.Commit(); err != nil {
		return fmt.Errorf("add columns: %w", err)
	}
	return nil
}

// promotionState is a plan re-resolved against the catalog by a bucket
// activity or the commit.
type promotionState struct {
	training       *table.Table
	target         *table.StagedTable
	staging        []*table.Table
	stagingChecked []backfill.Staging // staging, as checked
	checked        backfill.PromotePlan
	rng            backfill.DateRange
	// moved: main is no longer at the plan's base snapshot, which is still
	// one of its ancestors. Bucket activities then read the base snapshot
	// all the same, and the commit re-bases onto main if the snapshots in
	// between replaced none of the plan's partitions (see CommitPromotion).
	moved bool
	stale string // why the plan cannot be used any more; "" if it can
}

// resolve loads the tables of a plan and rebuilds its target schema. The
// plan stays usable while its base snapshot is an ancestor of main and the
// table as it is now gets the planned schema (another promotion of the
// same columns, or of other dates, leaves it so); otherwise stale says
// why, and nothing should be written.
func resolve(ctx context.Context, cat *lake.Catalog, plan *PromotionPlan) (*promotionState, error) {
	s := &promotionState{}
	var err error
	if s.rng, err = backfill.ParseDateRange(plan.Spec.StartDate, plan.Spec.EndDate); err != nil {
		return nil, badInput("%v", err)
	}
	if s.training, err = loadInput(ctx, cat, "training table", plan.Spec.Training); err != nil {
		return nil, err
	}
	cur := s.training.CurrentSnapshot()
	switch {
	case cur == nil:
		s.stale = fmt.Sprintf("training table %s has no current snapshot", plan.Spec.Training)
		return s, nil
	case cur.SnapshotID != plan.BaseSnapshot:
		if !isAncestor(s.training, cur.SnapshotID, plan.BaseSnapshot) {
			s.stale = fmt.Sprintf("training table %s moved from snapshot %d to %d, which does not descend from it", plan.Spec.Training, plan.BaseSnapshot, cur.SnapshotID)
			return s, nil
		}
		s.moved = true
	case s.training.Schema().ID != plan.BaseSchema:
		s.stale = fmt.Sprintf("training table %s schema moved from %d to %d", plan.Spec.Training, plan.BaseSchema, s.training.Schema().ID)
		return s, nil
	}
	if s.staging, s.stagingChecked, s.checked, err = checkPromotion(ctx, cat, s.training, plan.Spec); err != nil {
		return nil, err
	}
	if s.target, err = targetTable(s.training, s.stagingChecked, s.checked); err != nil {
		return nil, err
	}
	got, err := json.Marshal(s.target.Schema())
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(got, plan.TargetSchema) {
		s.stale = fmt.Sprintf("training table %s would get another schema than planned", plan.Spec.Training)
		if s.moved {
			s.stale = fmt.Sprintf("training table %s moved from snapshot %d to %d, with another schema", plan.Spec.Training, plan.BaseSnapshot, cur.SnapshotID)
		}
	}
	return s, nil
}

// isAncestor reports whether snapshot anc is id or one of its ancestors.
func isAncestor(tbl *table.Table, id, anc int64) bool {
	for _, snap := range table.AncestorsOf(id, tbl.Metadata().SnapshotByID) {
		if snap.SnapshotID == anc {
			return true
		}
	}
	return false
}
