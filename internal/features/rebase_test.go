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
	// D promotes day 2 again from a staging table staged anew: the same
	// staging snapshot as B's would find B's promotion in place and commit
	// nothing (TestPromotionAlreadyInPlace).
	e.stage(t, "features.user_daily", "ml.s_user", []string{"user_id"}, "u_", 0, 2)
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

// TestPromotionAlreadyInPlace: promoting the same staging snapshots over
// the same range into a table whose main holds exactly that promotion
// commits nothing and reports main's head, with itself as the previous
// snapshot (a rollback of it undoes nothing); a new staging snapshot or
// another range promotes again.
func TestPromotionAlreadyInPlace(t *testing.T) {
	e := newEnv(t, 1000, 2)
	ctx := context.Background()
	e.stage(t, "features.user_daily", "ml.s_user", []string{"user_id"}, "u_", 0, 1)
	spec := features.PromoteSpec{Training: "ml.training", Staging: []string{"ml.s_user"}, StartDate: e.day(0), EndDate: e.day(1)}
	first, err := features.Promote(ctx, e.cat, spec, "first", 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	snapshots := func() int {
		tbl, err := e.cat.Load(ctx, "ml.training")
		if err != nil {
			t.Fatal(err)
		}
		return len(tbl.Metadata().Snapshots())
	}
	before := snapshots()
	again, err := features.Promote(ctx, e.cat, spec, "again", 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if again.Snapshot != first.Snapshot || again.PreviousSnapshot != first.Snapshot || again.Files != 0 {
		t.Fatalf("same promotion again: %+v; want snapshot %d reported, nothing committed", again, first.Snapshot)
	}
	if got := snapshots(); got != before {
		t.Fatalf("same promotion again made %d snapshots", got-before)
	}
	other := spec
	other.EndDate = e.day(0)
	if r, err := features.Promote(ctx, e.cat, other, "other", 2, nil); err != nil || r.Snapshot == first.Snapshot {
		t.Fatalf("another range: %+v, %v; want a new snapshot", r, err)
	}
}
