package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/runs"
)

// promoteGateSpec promotes one date into ml.training, waits for a file to
// exist, then gates on a given AUC (failing the run below 0.7); its
// on_failure rolls the promotion back.
const promoteGateSpec = `
name: promote_gate
params:
  date: {type: string}
  auc: {type: number}
  wait_file: {type: string}
nodes:
  - id: promote
    type: promote_features
    with: {training_table: ml.training, staging_tables: [ml.s_user], start_date: "${params.date}", end_date: "${params.date}"}
  - id: wait
    type: command
    needs: [promote]
    retry: {max_attempts: 1}
    with:
      argv: ["sh", "-c", "i=0; while [ ! -f \"$1\" ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done", "sh", "${params.wait_file}"]
  - id: gate
    type: gate
    needs: [wait]
    with:
      candidate: {auc: "${params.auc}"}
      candidate_id: "${params.date}"
      metrics: {auc: {direction: higher_is_better, min: 0.7}}
      on_reject: fail
on_failure:
  - id: rollback
    type: rollback_table
    compensates: promote
    with:
      table: ml.training
      to: ${nodes.promote.outputs.previous_snapshot_id}
      snapshot: ${nodes.promote.outputs.snapshot_id}
`

// TestRollbackSparesLaterPromotion: run A promotes 2026-11-01 and waits;
// run B promotes 2026-11-02 and succeeds; then A fails at its gate. A's
// rollback commits a snapshot that takes only A's files out: B's date
// reads exactly as B left it (checksum over every column), A's date reads
// as before A (checksum over the columns it had, and no value in the
// promoted ones), and no row is lost or doubled.
func TestRollbackSparesLaterPromotion(t *testing.T) {
	parallel(t)
	l := newTestLake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	spec := features.StageSpec{Training: "ml.training", Feature: "features.user_daily", Keys: []string{"user_id"}, Alignment: "previous_day",
		Prefix: "u_", Staging: "ml.s_user", StartDate: demoStart, EndDate: demoEnd}
	if _, err := features.Stage(ctx, l.cat, spec, quiet); err != nil {
		t.Fatal(err)
	}
	const dateA, dateB = "2026-11-01", "2026-11-02"
	original := l.checksum(t, "ml.training").Columns
	aBefore := dayChecksum(t, l.cat, dateA, original...)
	release := filepath.Join(t.TempDir(), "release-a")
	present := filepath.Join(t.TempDir(), "present")
	if err := os.WriteFile(present, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	runA, err := runs.Start(ctx, tclient, runs.Request{Spec: []byte(promoteGateSpec), SpecFile: "promote_gate.yaml", TaskQueue: l.queue,
		Params: map[string]any{"date": dateA, "auc": 0.61, "wait_file": release}})
	if err != nil {
		t.Fatal(err)
	}
	// A's promotion lands first.
	waitFor(t, 2*time.Minute, func() bool { return promotedBy(t, l.cat, runA.ID) })
	resB := l.run(t, runs.Request{Spec: []byte(promoteGateSpec), SpecFile: "promote_gate.yaml",
		Params: map[string]any{"date": dateB, "auc": 0.9, "wait_file": present}})
	wantStatus(t, resB, runs.StatusSucceeded)
	bAfter := dayChecksum(t, l.cat, dateB)
	total := l.checksum(t, "ml.training")
	t.Logf("after B promoted: %s %d rows %s; table %d rows", dateB, bAfter.Rows, bAfter.Digest, total.Rows)

	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	resA, err := runs.Wait(ctx, tclient, runA.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, resA, runs.StatusFailed)
	if g := node(t, resA, "gate"); g.Status != runs.NodeFailed {
		t.Fatalf("A's gate: %s", g.Status)
	}
	if len(resA.Compensations) != 1 || resA.Compensations[0].Status != runs.NodeSucceeded {
		t.Fatalf("A's compensations %+v", resA.Compensations)
	}
	rb := resA.Compensations[0].Outputs
	t.Logf("A's rollback: %v", rb["summary"])
	pa, pb := node(t, resA, "promote").Outputs, node(t, resB, "promote").Outputs
	if rb["action"] != "reverted" || rb["from_snapshot_id"] != pb["snapshot_id"] || rb["promotion_snapshot_id"] != pa["snapshot_id"] ||
		rb["files_removed"] != pa["files"] || rb["schema_restored"] != false {
		t.Fatalf("A's rollback outputs %v; A promoted %v, B %v", rb, pa, pb)
	}

	bNow := dayChecksum(t, l.cat, dateB)
	aNow := dayChecksum(t, l.cat, dateA, original...)
	t.Logf("after A's rollback: %s %d rows %s (was %s); %s %d rows %s over its columns before (was %s)",
		dateB, bNow.Rows, bNow.Digest, bAfter.Digest, dateA, aNow.Rows, aNow.Digest, aBefore.Digest)
	if bNow.Digest != bAfter.Digest || bNow.Rows != bAfter.Rows {
		t.Errorf("B's date changed: %+v, was %+v", bNow, bAfter)
	}
	if aNow.Digest != aBefore.Digest || aNow.Rows != aBefore.Rows {
		t.Errorf("A's date is not as before A: %+v, want %+v", aNow, aBefore)
	}
	promoted := anyList(pa["columns"])
	if n := valuesIn(t, l.cat, dateA, promoted); n != 0 {
		t.Errorf("A's date still holds %d values of A's columns %v", n, promoted)
	}
	if n := valuesIn(t, l.cat, dateB, promoted); n == 0 {
		t.Errorf("B's date lost the values of %v", promoted)
	}
	if sum := l.checksum(t, "ml.training"); sum.Rows != total.Rows {
		t.Errorf("%d rows after the rollback, %d before", sum.Rows, total.Rows)
	}
}

// promotedBy reports whether run's promotion has committed on ml.training.
func promotedBy(t *testing.T, cat *lake.Catalog, run string) bool {
	t.Helper()
	tbl, err := cat.Load(context.Background(), "ml.training")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range lake.Snapshots(tbl) {
		if strings.HasPrefix(s.Summary[features.PropPromotionID], run+"/") {
			return true
		}
	}
	return false
}

// dayChecksum is the checksum of ml.training's rows of one date, over cols
// (all columns if none).
func dayChecksum(t *testing.T, cat *lake.Catalog, date string, cols ...string) lake.Checksum {
	t.Helper()
	tbl, err := cat.Load(context.Background(), "ml.training")
	if err != nil {
		t.Fatal(err)
	}
	d, err := backfill.ParseDay(date)
	if err != nil {
		t.Fatal(err)
	}
	opts := []table.ScanOption{table.WithRowFilter(lake.DateRange("date", int32(d), int32(d)))}
	if len(cols) > 0 {
		opts = append(opts, table.WithSelectedFields(cols...))
	}
	sum, err := lake.TableChecksum(context.Background(), tbl, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// valuesIn counts the non-null values of cols in ml.training's rows of
// one date.
func valuesIn(t *testing.T, cat *lake.Catalog, date string, cols []string) int64 {
	t.Helper()
	ctx := context.Background()
	tbl, err := cat.Load(ctx, "ml.training")
	if err != nil {
		t.Fatal(err)
	}
	d, err := backfill.ParseDay(date)
	if err != nil {
		t.Fatal(err)
	}
	_, recs, err := tbl.Scan(table.WithRowFilter(lake.DateRange("date", int32(d), int32(d))),
		table.WithSelectedFields(append([]string{"date"}, cols...)...)).ToArrowRecords(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for rec, err := range recs {
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i < int(rec.NumCols()); i++ {
			n += int64(rec.Column(i).Len() - rec.Column(i).NullN())
		}
		rec.Release()
	}
	return n
}

func anyList(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, x := range l {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
