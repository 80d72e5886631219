package features_test

import (
	"context"
	"testing"

	"github.com/retrain-ml/retrain/internal/features"
)

// planAndWrite plans a promotion and runs its bucket groups, without
// committing: what the workflow has done when another commit lands.
func (e *env) planAndWrite(t *testing.T, spec features.PromoteSpec, id string) (*features.PromotionPlan, []features.BucketResult) {
	t.Helper()
	ctx := context.Background()
	plan, err := features.PlanPromotion(ctx, e.cat, spec, id)
	if err != nil {
		t.Fatal(err)
	}
	var results []features.BucketResult
	for _, g := range plan.Groups {
		r, err := features.PromoteBuckets(ctx, e.cat, plan, g, nil)
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, r)
	}
	return plan, results
}

// TestPromotionRebases: promotion B is planned and written for day 2; A,
// of the same columns, lands on days 0..1 meanwhile. B's commit re-bases
// on A's snapshot, rewriting nothing, and every day carries its values.
// Then C (days 1..2) is written and D lands on day 2: C shares a
// partition with D's commit, so C is refused and must be planned again.
func TestPromotionRebases(t *testing.T) {
	e := newEnv(t, 2000, 3)
	ctx := context.Background()
	e.stage(t, "features.user_daily", "ml.s_user", []string{"user_id"}, "u_", 0, 2)
	base := rowsOf(t, e.cat, "ml.training", "request_id", "user_id", "ad_id", "event_ts", "date", "label")
	spec := func(from, to int) features.PromoteSpec {
		return features.PromoteSpec{Training: "ml.training", Staging: []string{"ml.s_user"}, StartDate: e.day(from), EndDate: e.day(to), Groups: 2}
	}

	planB, resultsB := e.planAndWrite(t, spec(2, 2), "b/1")
	filesBefore := e.dataFiles(t)
	a, err := features.Promote(ctx, e.cat, spec(0, 1), "a", 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	written := e.dataFiles(t) - filesBefore
	c, err := features.CommitPromotion(ctx, e.cat, planB, resultsB, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Conflict || !c.Rebased || c.PreviousSnapshot != a.Snapshot {
		t.Fatalf("commit of B after A landed on other days: %+v; want it re-based on A's snapshot %d", c, a.Snapshot)
	}
	if got := e.dataFiles(t) - filesBefore; got != written {
		t.Errorf("re-basing B wrote %d data files; want none beyond A's %d", got-written, written)
	}
	e.checkPromoted(t, "ml.s_user", []string{"u_activity", "u_ctr_7d", "u_recent_ads"}, base)
	again, err := features.CommitPromotion(ctx, e.cat, planB, resultsB, nil)
	if err != nil || !again.Already || again.Snapshot != c.Snapshot || again.PreviousSnapshot != a.Snapshot {
		t.Fatalf("retried re-based commit: %+v %v; want the snapshot %d it made, on %d", again, err, c.Snapshot, a.Snapshot)
	}

	planC, resultsC := e.planAndWrite(t, spec(1, 2), "c/1")
	d, err := features.Promote(ctx, e.cat, spec(2, 2), "d", 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := features.CommitPromotion(ctx, e.cat, planC, resultsC, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c2.Conflict || c2.Rebased {
		t.Fatalf("commit of C over D's partition: %+v; want a conflict", c2)
	}
	if tbl, _ := e.cat.Load(ctx, "ml.training"); tbl.CurrentSnapshot().SnapshotID != d.Snapshot {
		t.Fatal("a refused re-base moved the table")
	}
	e.checkPromoted(t, "ml.s_user", []string{"u_activity", "u_ctr_7d", "u_recent_ads"}, base)
}
