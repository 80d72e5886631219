package integration

import (
	"context"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/worker"
)

// testLake is a lake in a temp dir holding small demo tables, and a worker
// on queue whose lake steps use it.
type testLake struct {
	cfg   lake.Config
	cat   *lake.Catalog
	dir   string
	queue string
}

const (
	demoDays  = 3
	demoStart = "2026-11-01"
	demoEnd   = "2026-11-03"
)

func newTestLake(t *testing.T) *testLake {
	t.Helper()
	ctx := context.Background()
	l := &testLake{dir: t.TempDir(), queue: newQueue(t)}
	l.cfg = lake.Config{DataDir: l.dir}
	cat, err := lake.Open(ctx, l.cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	l.cat = cat
	if _, err := demodata.Write(ctx, cat, demodata.Config{Rows: 3000, Days: demoDays, Seed: 9, Users: 300, Ads: 40}, demodata.DefaultTables, false, quiet); err != nil {
		t.Fatal(err)
	}
	startWorkerWith(t, worker.Config{TaskQueue: l.queue, Lake: l.cfg})
	return l
}

func (l *testLake) checksum(t *testing.T, name string) lake.Checksum {
	t.Helper()
	return tableChecksum(t, l.cat, name)
}

// dataFilesSince lists the Parquet files under the warehouse modified at or
// after t.
func (l *testLake) dataFilesSince(t *testing.T, since time.Time) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(filepath.Join(l.dir, "warehouse"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".parquet") {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !info.ModTime().Before(since) {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (l *testLake) run(t *testing.T, req runs.Request) *runs.Result {
	t.Helper()
	req.TaskQueue = l.queue
	return runRequest(t, req, 3*time.Minute)
}

// TestBackfillPipeline runs the example backfill pipeline by name: both
// stagings in parallel, stats, one promotion, the check.
func TestBackfillPipeline(t *testing.T) {
	l := newTestLake(t)
	before := l.checksum(t, "ml.training")
	res := l.run(t, runs.Request{Pipeline: "backfill", Params: map[string]any{"start_date": demoStart, "end_date": demoEnd}})
	wantStatus(t, res, runs.StatusSucceeded)
	su, sa := node(t, res, "stage_user"), node(t, res, "stage_ad")
	if !su.StartedAt.Before(*sa.EndedAt) || !sa.StartedAt.Before(*su.EndedAt) {
		t.Errorf("stage nodes did not overlap: user %v..%v, ad %v..%v", su.StartedAt, su.EndedAt, sa.StartedAt, sa.EndedAt)
	}
	p := node(t, res, "promote")
	if p.Outputs["rounds"] != float64(1) || p.Outputs["rows"] != float64(3000) {
		t.Errorf("promote outputs %v", p.Outputs)
	}
	if !strings.HasPrefix(node(t, res, "stats_user").Outputs["html_uri"].(string), "file://") {
		t.Errorf("stats outputs %v", node(t, res, "stats_user").Outputs)
	}
	// retrain dev's report server links the report to this page and
	// serves it.
	srv := httptest.NewServer(cli.ReportHandler(tclient, nil, cli.ReportLinks{}, quiet))
	defer srv.Close()
	report := httpGet(t, srv.URL+"/runs/"+res.ID)
	if want := "/stats/stats_user/" + res.ID; !strings.Contains(report, want) {
		t.Errorf("report does not link %s", want)
	}
	if page := httpGet(t, srv.URL+"/stats/stats_user/"+res.ID); !strings.Contains(page, "u_activity") {
		t.Errorf("stats page of stats_user does not profile u_activity: %.200s", page)
	}
	after := l.checksum(t, "ml.training")
	if after.Rows != before.Rows || len(after.Columns) != len(before.Columns)+8 {
		t.Errorf("after promotion: %d rows, columns %v", after.Rows, after.Columns)
	}
}

// TestBackfillRollsBackOnFailure: the check after promotion fails, the
// on_failure node rolls the training table back, and the table then scans
// exactly as before the promotion (row-for-row checksum) without the
// rollback having written a data file.
func TestBackfillRollsBackOnFailure(t *testing.T) {
	l := newTestLake(t)
	before := l.checksum(t, "ml.training")
	res := l.run(t, runs.Request{Pipeline: "backfill", Params: map[string]any{"start_date": demoStart, "end_date": demoEnd, "fail_after_promote": true}})
	wantStatus(t, res, runs.StatusFailed)
	if n := node(t, res, "check"); n.Status != runs.NodeFailed {
		t.Fatalf("check: %s", n.Status)
	}
	promote := node(t, res, "promote")
	if len(res.Compensations) != 1 {
		t.Fatalf("compensations %+v", res.Compensations)
	}
	rb := res.Compensations[0]
	if rb.ID != "rollback" || rb.Status != runs.NodeSucceeded {
		t.Fatalf("rollback %+v", rb)
	}
	if rb.Outputs["to_snapshot_id"] != promote.Outputs["previous_snapshot_id"] || rb.Outputs["from_snapshot_id"] != promote.Outputs["snapshot_id"] {
		t.Errorf("rollback %v after promotion %v", rb.Outputs, promote.Outputs)
	}
	after := l.checksum(t, "ml.training")
	if after.Digest != before.Digest || after.Rows != before.Rows || strings.Join(after.Columns, ",") != strings.Join(before.Columns, ",") {
		t.Errorf("after rollback %+v, before promotion %+v", after, before)
	}
	if written := l.dataFilesSince(t, rb.StartedAt.Add(-time.Millisecond)); len(written) > 0 {
		t.Errorf("rollback wrote data files: %v", written)
	}
}

// TestConcurrentPromotionsBothLand starts two runs promoting different
// staging tables into one table at once. Both succeed; if their commits
// raced, the loser was redone on the fresh table; no column or row is lost.
func TestConcurrentPromotionsBothLand(t *testing.T) {
	l := newTestLake(t)
	ctx := context.Background()
	for _, s := range []features.StageSpec{
		{Feature: "features.user_daily", Keys: []string{"user_id"}, Alignment: "previous_day", Prefix: "u_", Staging: "ml.s_user"},
		{Feature: "features.ad_daily", Keys: []string{"ad_id"}, Alignment: "as_of", Staging: "ml.s_ad"},
	} {
		s.Training, s.StartDate, s.EndDate = "ml.training", demoStart, demoEnd
		if _, err := features.Stage(ctx, l.cat, s, quiet); err != nil {
			t.Fatal(err)
		}
	}
	const spec = `
name: promote_one
params:
  staging: {type: string}
nodes:
  - id: promote
    type: promote_features
    with: {training_table: ml.training, staging_tables: ["${params.staging}"], start_date: "2026-11-01", end_date: "2026-11-03", bucket_groups: 4}
`
	var wg sync.WaitGroup
	results := make([]*runs.Result, 2)
	for i, staging := range []string{"ml.s_user", "ml.s_ad"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = l.run(t, runs.Request{Spec: []byte(spec), SpecFile: "promote_one.yaml", Params: map[string]any{"staging": staging}})
		}()
	}
	wg.Wait()
	rounds := 0.0
	for _, res := range results {
		wantStatus(t, res, runs.StatusSucceeded)
		rounds += node(t, res, "promote").Outputs["rounds"].(float64)
	}
	t.Logf("rounds in all: %v (more than 2: a promotion was redone)", rounds)
	sum := l.checksum(t, "ml.training")
	cols := strings.Join(sum.Columns, ",")
	for _, c := range []string{"u_ctr_7d", "u_recent_ads", "ad_quality", "ad_ctr_7d"} {
		if !strings.Contains(cols, c) {
			t.Errorf("column %s lost: %s", c, cols)
		}
	}
	if sum.Rows != 3000 {
		t.Errorf("%d rows, want 3000", sum.Rows)
	}
	tbl, _ := l.cat.Load(ctx, "ml.training")
	if n := len(lake.Snapshots(tbl)); n != 3 {
		t.Errorf("%d snapshots, want 3 (the data, then one per promotion)", n)
	}
}

// TestPromoteBadInputFailsOnce: a promotion naming a missing staging table
// fails without retries, naming the table.
func TestPromoteBadInputFailsOnce(t *testing.T) {
	l := newTestLake(t)
	res := l.run(t, runs.Request{SpecFile: "bad.yaml", Spec: []byte(`
name: bad
nodes:
  - id: promote
    type: promote_features
    with: {training_table: ml.training, staging_tables: [ml.nope], start_date: "2026-11-01", end_date: "2026-11-03"}
  - id: rollback_unknown
    type: rollback_table
    with: {table: ml.training, to: "1"}
`)})
	wantStatus(t, res, runs.StatusFailed)
	p := node(t, res, "promote")
	if p.Status != runs.NodeFailed || !strings.Contains(p.Error, "staging table ml.nope does not exist") {
		t.Errorf("promote: %s %q", p.Status, p.Error)
	}
	if _, err := os.Stat(filepath.Join(l.dir, "warehouse", "ml.db", "nope")); err == nil {
		t.Error("a table was created for bad input")
	}
}

// httpGet fetches url and fails the test unless it answers 200.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %s", url, resp.Status, b)
	}
	return string(b)
}

// tableChecksum is the checksum of the current snapshot of table name.
func tableChecksum(t *testing.T, cat *lake.Catalog, name string) lake.Checksum {
	t.Helper()
	tbl, err := cat.Load(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := lake.TableChecksum(context.Background(), tbl)
	if err != nil {
		t.Fatalf("checksum of %s: %v", name, err)
	}
	return sum
}
