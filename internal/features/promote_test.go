package features_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
)

func (e *env) stage(t *testing.T, feature, staging string, keys []string, prefix string, from, to int) features.StageResult {
	t.Helper()
	res, err := features.Stage(context.Background(), e.cat, features.StageSpec{
		Training: "ml.training", Feature: feature, Keys: keys,
		StartDate: e.day(from), EndDate: e.day(to), Alignment: "previous_day",
		Prefix: prefix, Staging: staging,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (e *env) checksum(t *testing.T, name string) lake.Checksum {
	t.Helper()
	tbl, err := e.cat.Load(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := lake.TableChecksum(context.Background(), tbl)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// checkPromoted verifies every training row in the promoted days carries
// exactly its staged values, and rows outside them are unchanged.
func (e *env) checkPromoted(t *testing.T, staging string, cols []string, before map[int64][]any) {
	t.Helper()
	staged := rowsOf(t, e.cat, staging, "request_id", cols...)
	after := rowsOf(t, e.cat, "ml.training", "request_id", append([]string{"user_id", "ad_id", "event_ts", "date", "label"}, cols...)...)
	if len(after) != len(before) {
		t.Fatalf("training table has %d rows after promotion, %d before", len(after), len(before))
	}
	for id, old := range before {
		row, ok := after[id]
		if !ok {
			t.Fatalf("request %d lost", id)
		}
		for i := range old {
			if row[i] != old[i] {
				t.Fatalf("request %d: column %d changed from %v to %v", id, i, old[i], row[i])
			}
		}
		want, isStaged := staged[id]
		for k, c := range cols {
			got := row[len(old)+k]
			switch {
			case isStaged && got != want[k]:
				t.Fatalf("request %d: %s = %v, staged %v", id, c, got, want[k])
			case !isStaged && got != nil:
				t.Fatalf("request %d outside the promoted range has %s = %v", id, c, got)
			}
		}
	}
}

// TestPromoteThenRollback promotes two staging tables, checks every value,
// then rolls back and checks the table reads exactly as before (row for
// row checksum) and that the rollback wrote no data file.
func TestPromoteThenRollback(t *testing.T) {
	e := newEnv(t, 3000, 4)
	ctx := context.Background()
	e.stage(t, "features.user_daily", "ml.s_user", []string{"user_id"}, "u_", 1, 2)
	e.stage(t, "features.ad_daily", "ml.s_ad", []string{"ad_id"}, "", 1, 2)
	before := e.checksum(t, "ml.training")
	base := rowsOf(t, e.cat, "ml.training", "request_id", "user_id", "ad_id", "event_ts", "date", "label")

	res, err := features.Promote(ctx, e.cat, features.PromoteSpec{
		Training: "ml.training", Staging: []string{"ml.s_user", "ml.s_ad"},
		StartDate: e.day(1), EndDate: e.day(2), Groups: 3,
	}, "test/promote", 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rounds != 1 || res.Rows == 0 || res.Matched == 0 || res.PreviousSnapshot == 0 || res.Snapshot == res.PreviousSnapshot {
		t.Fatalf("result %+v", res)
	}
	e.checkPromoted(t, "ml.s_user", []string{"u_activity", "u_ctr_7d", "u_recent_ads"}, base)
	e.checkPromoted(t, "ml.s_ad", []string{"ad_quality", "ad_age_days"}, base)
	tbl, _ := e.cat.Load(ctx, "ml.training")
	if n := len(lake.Snapshots(tbl)); n != 2 {
		t.Errorf("%d snapshots after one promotion, want 2 (one commit)", n)
	}
	if after := e.checksum(t, "ml.training"); after.Digest == before.Digest || after.Rows != before.Rows {
		t.Errorf("promotion did not change the checksum (%v) or changed the rows (%d -> %d)", after.Digest, before.Rows, after.Rows)
	}

	files := e.dataFiles(t)
	rb, err := e.cat.Rollback(ctx, "ml.training", res.PreviousSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	if !rb.Ancestor || !rb.Schema {
		t.Errorf("rollback %+v: want an ancestor rollback that restores the schema", rb)
	}
	if got := e.dataFiles(t); got != files {
		t.Errorf("rollback wrote data files: %d before, %d after", files, got)
	}
	after := e.checksum(t, "ml.training")
	if after.Digest != before.Digest || after.Rows != before.Rows || strings.Join(after.Columns, ",") != strings.Join(before.Columns, ",") {
		t.Errorf("after rollback %+v, before promotion %+v", after, before)
	}

	// Rolling forward again (to a snapshot no longer on main) also works,
	// by setting the ref, and brings the promoted columns back.
	if rb, err := e.cat.Rollback(ctx, "ml.training", res.Snapshot); err != nil || rb.Ancestor {
		t.Fatalf("roll forward: %+v %v", rb, err)
	}
	e.checkPromoted(t, "ml.s_ad", []string{"ad_quality", "ad_age_days"}, base)
	if got := e.dataFiles(t); got != files {
		t.Errorf("roll forward wrote data files: %d before, %d after", files, got)
	}
}

// TestPromotionsRace: promotion B is planned and written, then promotion A
// lands first; B's commit detects it and commits nothing, and B redone on
// the fresh table lands with both promotions' columns and every row.
func TestPromotionsRace(t *testing.T) {
	e := newEnv(t, 2000, 3)
	ctx := context.Background()
	e.stage(t, "features.user_daily", "ml.s_user", []string{"user_id"}, "u_", 0, 2)
	e.stage(t, "features.ad_daily", "ml.s_ad", []string{"ad_id"}, "", 0, 2)
	base := rowsOf(t, e.cat, "ml.training", "request_id", "user_id", "ad_id", "event_ts", "date", "label")
	specA := features.PromoteSpec{Training: "ml.training", Staging: []string{"ml.s_user"}, StartDate: e.day(0), EndDate: e.day(2)}
	specB := features.PromoteSpec{Training: "ml.training", Staging: []string{"ml.s_ad"}, StartDate: e.day(0), EndDate: e.day(2)}

	planB, err := features.PlanPromotion(ctx, e.cat, specB, "b/1")
	if err != nil {
		t.Fatal(err)
	}
	var resultsB []features.BucketResult
	for _, g := range planB.Groups {
		r, err := features.PromoteBuckets(ctx, e.cat, planB, g, nil)
		if err != nil {
			t.Fatal(err)
		}
		resultsB = append(resultsB, r)
	}
	a, err := features.Promote(ctx, e.cat, specA, "a", 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := features.CommitPromotion(ctx, e.cat, planB, resultsB, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Conflict {
		t.Fatalf("stale promotion committed: %+v", c)
	}
	if tbl, _ := e.cat.Load(ctx, "ml.training"); tbl.CurrentSnapshot().SnapshotID != a.Snapshot {
		t.Fatal("a conflicting commit moved the table")
	}
	b, err := features.Promote(ctx, e.cat, specB, "b", 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b.PreviousSnapshot != a.Snapshot {
		t.Errorf("redone promotion based on %d, want A's snapshot %d", b.PreviousSnapshot, a.Snapshot)
	}
	e.checkPromoted(t, "ml.s_user", []string{"u_ctr_7d", "u_recent_ads"}, base)
	e.checkPromoted(t, "ml.s_ad", []string{"ad_quality", "ad_ctr_7d"}, base)

	// And truly concurrently: both land, and at least one was redone.
	e.stage(t, "features.user_daily", "ml.s_user2", []string{"user_id"}, "v_", 0, 2)
	e.stage(t, "features.ad_daily", "ml.s_ad2", []string{"ad_id"}, "w_", 0, 2)
	var wg sync.WaitGroup
	results := make([]features.PromoteResult, 2)
	errs := make([]error, 2)
	for i, st := range []string{"ml.s_user2", "ml.s_ad2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = features.Promote(ctx, e.cat, features.PromoteSpec{Training: "ml.training", Staging: []string{st}, StartDate: e.day(0), EndDate: e.day(2)}, "c"+st, 1, nil)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("concurrent promotions: rounds %d and %d", results[0].Rounds, results[1].Rounds)
	e.checkPromoted(t, "ml.s_user2", []string{"v_ctr_7d"}, base)
	e.checkPromoted(t, "ml.s_ad2", []string{"w_ad_quality"}, base)
	e.checkPromoted(t, "ml.s_user", []string{"u_ctr_7d"}, base)
	e.checkPromoted(t, "ml.s_ad", []string{"ad_quality"}, base)
}

// TestCommitIsIdempotent: a commit retried after it landed reports the
// snapshot it made and commits nothing more.
func TestCommitIsIdempotent(t *testing.T) {
	e := newEnv(t, 1000, 2)
	ctx := context.Background()
	e.stage(t, "features.ad_daily", "ml.s_ad", []string{"ad_id"}, "", 0, 1)
	plan, err := features.PlanPromotion(ctx, e.cat, features.PromoteSpec{Training: "ml.training", Staging: []string{"ml.s_ad"}, StartDate: e.day(0), EndDate: e.day(1), Groups: 2}, "idem/1")
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
	first, err := features.CommitPromotion(ctx, e.cat, plan, results, nil)
	if err != nil || first.Conflict {
		t.Fatalf("%+v %v", first, err)
	}
	again, err := features.CommitPromotion(ctx, e.cat, plan, results, nil)
	if err != nil || !again.Already || again.Snapshot != first.Snapshot {
		t.Fatalf("retried commit %+v %v, first %+v", again, err, first)
	}
	tbl, _ := e.cat.Load(ctx, "ml.training")
	if n := len(lake.Snapshots(tbl)); n != 2 {
		t.Errorf("%d snapshots, want 2", n)
	}
}

// TestPromoteUnalignedStaging promotes a staging table whose rows are in
// another order than the training files and miss every third row: the
// join must fall back from zipping to hashing and leave missing rows null.
func TestPromoteUnalignedStaging(t *testing.T) {
	e := newEnv(t, 1500, 2)
	ctx := context.Background()
	e.stage(t, "features.user_daily", "ml.s_user", []string{"user_id"}, "u_", 0, 1)
	base := rowsOf(t, e.cat, "ml.training", "request_id", "user_id", "ad_id", "event_ts", "date", "label")

	src, err := e.cat.Load(ctx, "ml.s_user")
	if err != nil {
		t.Fatal(err)
	}
	shuffled, err := e.cat.CreateTable(ctx, "ml.s_shuffled", src.Schema(), lake.TableSpec{Partition: ptr(src.Spec())})
	if err != nil {
		t.Fatal(err)
	}
	schema, recs, err := src.Scan().ToArrowRecords(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var batches []arrow.RecordBatch
	for rec, err := range recs {
		if err != nil {
			t.Fatal(err)
		}
		batches = append(batches, rec)
	}
	var all []arrow.Array
	for c := range schema.NumFields() {
		var chunks []arrow.Array
		for _, b := range batches {
			chunks = append(chunks, b.Column(c))
		}
		col, err := array.Concatenate(chunks, memory.DefaultAllocator)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, col)
	}
	rows := all[0].Len()
	var idx []int32
	for i := rows - 1; i >= 0; i-- {
		if i%3 != 0 {
			idx = append(idx, int32(i))
		}
	}
	cols, err := backfill.Take(ctx, memory.DefaultAllocator, all, idx)
	if err != nil {
		t.Fatal(err)
	}
	rec := array.NewRecordBatch(schema, cols, int64(len(idx)))
	files, err := lake.WriteFiles(ctx, shuffled, schema, func(yield func(arrow.RecordBatch, error) bool) { yield(rec, nil) })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.cat.AddFiles(ctx, "ml.s_shuffled", files, nil); err != nil {
		t.Fatal(err)
	}
	res, err := features.Promote(ctx, e.cat, features.PromoteSpec{Training: "ml.training", Staging: []string{"ml.s_shuffled"}, StartDate: e.day(0), EndDate: e.day(1)}, "shuffled", 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Matched != int64(len(idx)) || res.Rows != 1500 {
		t.Errorf("matched %d of %d rows, want %d", res.Matched, res.Rows, len(idx))
	}
	e.checkPromoted(t, "ml.s_shuffled", []string{"u_ctr_7d", "u_recent_ads", "u_sessions"}, base)
}

func ptr[T any](v T) *T { return &v }
