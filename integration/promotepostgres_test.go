package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/internal/devkit/pgtest"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/runs"
)

// TestPromoteAcrossWorkersPostgres is TestPromoteAcrossWorkers on the
// catalog several hosts share: a real PostgreSQL server (pgtest), a
// warehouse on the S3 server, two retrain-worker processes given
// --catalog-uri postgres://...
//
//  1. one worker: the reference checksum;
//  2. two workers: both take bucket groups, the checksum is the reference's;
//  3. two runs promote into one table at once: both succeed, the table
//     gets both snapshots (nothing lost: each run's promotion is in its
//     history), and the checksum is still the reference's (the same
//     features promoted twice).
func TestPromoteAcrossWorkersPostgres(t *testing.T) {
	parallelFor(t, 50*time.Second)
	if testing.Short() {
		t.Skip("builds retrain-worker and starts PostgreSQL, an S3 server and two worker processes")
	}
	pg := pgtest.Start(t)
	e := newSharedLakeOn(t, pg.NewDatabase(t))
	bin := treeBinary(t, "./cmd/retrain-worker")
	a := e.startWorker(t, bin, "A")

	single := e.promote(t, "ml.training", nil)
	want := e.checksum(t, "ml.training")
	t.Logf("single (postgres catalog): checksum %s (%d rows), node %.2f s", want.Digest, want.Rows, single.wall.Seconds())

	b := e.startWorker(t, bin, "B")
	two := e.promote(t, "ml.training_two", nil)
	per := two.perWorker()
	if per[a.identity] == 0 || per[b.identity] == 0 {
		t.Errorf("two workers: groups per worker %v: want both A (%s) and B (%s) to take groups", per, a.identity, b.identity)
	}
	t.Logf("two workers: groups %d by A, %d by B, node %.2f s", per[a.identity], per[b.identity], two.wall.Seconds())
	e.wantChecksum(t, "two workers", "ml.training_two", want)

	e.promoteConcurrently(t, "ml.training_kill", 2)
	e.wantChecksum(t, "two concurrent runs", "ml.training_kill", want)
}

// promoteConcurrently starts n runs promoting the staged features into
// one table at once and checks that every run succeeds and the table gets
// one snapshot per run that committed, each that run's promotion. The runs
// promote the same staging snapshots over the same range, so a run that
// finds another's identical promotion already on main commits nothing and
// returns that snapshot (`already`): it must name one of these runs'.
func (e *sharedLake) promoteConcurrently(t *testing.T, training string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	before, err := e.cat.Load(ctx, training)
	if err != nil {
		t.Fatal(err)
	}
	spec := fmt.Sprintf(`name: promote_concurrently
nodes:
  - id: promote
    type: promote_features
    with: {training_table: %s, staging_tables: [%s], start_date: %q, end_date: %q, bucket_groups: %d}
`, training, strings.Join(e.staging, ", "), demoStart, demoEnd, pwGroups)
	var ids []string
	already := map[string]string{} // run -> the snapshot it found in place
	for range n {
		run, err := runs.Start(ctx, tclient, runs.Request{Spec: []byte(spec), SpecFile: "promote_concurrently.yaml", TaskQueue: e.queue})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, run.ID)
	}
	for _, id := range ids {
		res, err := runs.Wait(ctx, tclient, id, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, res, runs.StatusSucceeded)
		out := node(t, res, "promote").Outputs
		t.Logf("concurrent run %s: rounds %v, attempts %d, %v", id, out["rounds"], node(t, res, "promote").Attempts, out["summary"])
		if out["already"] == true {
			already[id] = fmt.Sprint(out["snapshot_id"])
		}
	}
	after, err := e.cat.Load(ctx, training)
	if err != nil {
		t.Fatal(err)
	}
	snaps := lake.Snapshots(after)
	if committed := n - len(already); committed < 1 || len(snaps) != len(lake.Snapshots(before))+committed {
		t.Errorf("%s: %d snapshots after %d concurrent promotions (%d found theirs in place), %d before: want one each that committed", training, len(snaps), n, len(already), len(lake.Snapshots(before)))
	}
	for _, id := range ids {
		if snap, ok := already[id]; ok {
			by := ""
			for _, s := range snaps {
				if fmt.Sprint(s.ID) == snap {
					by = s.Summary[features.PropPromotionID]
				}
			}
			if !slices.ContainsFunc(ids, func(other string) bool { return other != id && strings.HasPrefix(by, other+"/") }) {
				t.Errorf("run %s found snapshot %s in place, which is not another of these runs' promotion (%q)", id, snap, by)
			}
			continue
		}
		found := 0
		for _, s := range snaps {
			if strings.HasPrefix(s.Summary[features.PropPromotionID], id+"/") {
				found++
			}
		}
		if found != 1 {
			t.Errorf("run %s: %d snapshots of its promotion in %s, want 1", id, found, training)
		}
	}
}
