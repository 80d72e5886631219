package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/internal/dataset"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/schedules"
	"github.com/retrain-ml/retrain/worker"
)

// waitEnvSeconds reads a duration in seconds from the environment: the
// tests run short by default; the documented figures (rows landing 40 s
// after the start, a 30 s deadline) are the same tests with longer ones.
func waitEnvSeconds(t *testing.T, key string, def int) time.Duration {
	if v := os.Getenv(key); v != "" {
		var n int
		if _, err := fmt.Sscan(v, &n); err == nil && n > 0 {
			def = n
		}
	}
	t.Logf("%s=%d", key, def)
	return time.Duration(def) * time.Second
}

// countDay counts the rows of date col == day in the table's current snapshot.
func countDay(t *testing.T, cat *lake.Catalog, name, day string) int64 {
	t.Helper()
	ctx := context.Background()
	tbl, err := cat.Load(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	d, err := backfill.ParseDay(day)
	if err != nil {
		t.Fatal(err)
	}
	_, recs, err := lake.Scan(ctx, tbl, table.WithRowFilter(iceberg.EqualTo(iceberg.Reference("date"), iceberg.Date(int32(d)))),
		table.WithSelectedFields("date")).ToArrowRecords(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for rec, err := range recs {
		if err != nil {
			t.Fatal(err)
		}
		ds, err := dataset.Dates(rec, "date")
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range ds {
			if x == int32(d) {
				n++
			}
		}
	}
	return n
}

// TestWaitForRowsLanding runs a pipeline for 2026-11-03 whose training
// rows for that day land a few seconds after the run started (another
// writer appends them as one snapshot). The run waits, says why in its
// state, and once the rows are there splits and trains on the whole day:
// the split's train rows are the day's rows, and the run records the
// snapshot it saw them in.
func TestWaitForRowsLanding(t *testing.T) {
	parallel(t)
	landAfter := waitEnvSeconds(t, "RETRAIN_TEST_WAIT_LAND_S", 4)
	e := newRetrainEnvData(t, true, demodata.Config{Rows: 3000, Days: 3, Seed: 4})
	ctx := context.Background()
	// late.training holds 11-01 and 11-02; src.* holds 11-03 and 11-04,
	// whose files the "upstream job" adds to late.training later.
	late := demodata.Tables{Training: "late.training", Users: "late.users", Ads: "late.ads"}
	if _, err := demodata.Write(ctx, e.cat, demodata.Config{Rows: 2000, Days: 2, Seed: 5}, late, false, quiet); err != nil {
		t.Fatal(err)
	}
	src := demodata.Tables{Training: "src.training", Users: "src.users", Ads: "src.ads"}
	start, _ := backfill.ParseDay("2026-11-03")
	if _, err := demodata.Write(ctx, e.cat, demodata.Config{Rows: 2000, Days: 2, Seed: 6, Start: start}, src, false, quiet); err != nil {
		t.Fatal(err)
	}
	fullDay := countDay(t, e.cat, "src.training", "2026-11-03")
	if fullDay == 0 || countDay(t, e.cat, "late.training", "2026-11-03") != 0 {
		t.Fatalf("setup: %d rows for the day in src, want some, and none yet in late", fullDay)
	}

	spec := `
name: waits_for_rows
wait_for:
  - table: late.training
    min_rows: 10
    deadline: 2m
    poll: 1s
nodes:
  - id: split
    type: split
    with: {table: late.training, start_date: "${run.logical_date}", end_date: "${date_add(run.logical_date, 1)}", sparse: [user_id, ad_id], eval_days: 1}
  - id: train
    type: train
    needs: [split]
    heartbeat: 30s
    with: {trainer: builtin, data: "${nodes.split.outputs.uri}", dim: 4, epochs: 1, batch_size: 256, seed: 1}
`
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	run, err := runs.Start(cctx, tclient, runs.Request{Spec: []byte(spec), SpecFile: "waits.yaml", TaskQueue: e.queue, LogicalDate: "2026-11-03"})
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	// While it waits, its state says so and why.
	var seen *runs.Result
	waitFor(t, time.Minute, func() bool {
		st, err := runs.State(cctx, tclient, run.ID)
		if err == nil && st.Status == runs.StatusWaiting && len(st.Waiting) == 1 {
			seen = st
			return true
		}
		return false
	})
	t.Logf("while waiting: %s", seen.Waiting[0].Text(time.Now()))
	if w := seen.Waiting[0]; w.Condition != "table late.training" || !strings.Contains(w.Saw, "late.training has no rows for 2026-11-03") ||
		!strings.Contains(w.Saw, "rows for 11-02") {
		t.Errorf("waiting: %+v", w)
	}
	if n := seen.Node("split"); n.Status != runs.NodePending {
		t.Errorf("split %s while the run waits for its data", n.Status)
	}

	// The upstream job lands the day (and the next) in one snapshot.
	time.Sleep(time.Until(started.Add(landAfter)))
	srcTbl, err := e.cat.Load(ctx, "src.training")
	if err != nil {
		t.Fatal(err)
	}
	files, err := lake.FilesOf(ctx, srcTbl.Scan())
	if err != nil {
		t.Fatal(err)
	}
	// landedAt is taken before the commit: the run may see the snapshot
	// before AddFiles returns.
	landedAt := time.Now()
	landed, err := e.cat.AddFiles(ctx, "late.training", files, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("landed %d files (%d rows for 2026-11-03) in snapshot %d, %s after the start", len(files), fullDay,
		landed.CurrentSnapshot().SnapshotID, landedAt.Sub(started).Round(time.Millisecond))

	res, err := runs.Wait(cctx, tclient, run.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, runs.StatusSucceeded)
	split := node(t, res, "split")
	if split.StartedAt.Before(landedAt) {
		t.Errorf("split started at %s, before the rows landed at %s", split.StartedAt, landedAt)
	}
	if got := split.Outputs["train_rows"]; got != float64(fullDay) {
		t.Errorf("split's training rows %v, want the full day's %d", got, fullDay)
	}
	if got := node(t, res, "train").Outputs["train_rows"]; got != float64(fullDay) {
		t.Errorf("trained on %v rows, want the full day's %d", got, fullDay)
	}
	if len(res.Ready) != 1 || res.Ready[0].SnapshotID != fmt.Sprint(landed.CurrentSnapshot().SnapshotID) || res.Ready[0].Rows != fullDay {
		t.Errorf("ready: %+v, want snapshot %d with %d rows", res.Ready, landed.CurrentSnapshot().SnapshotID, fullDay)
	}
	// The split read the snapshot the condition saw ready, pinned.
	if got := split.Outputs["snapshot_id"]; got != res.Ready[0].SnapshotID {
		t.Errorf("split read snapshot %v, want the one seen ready, %s", got, res.Ready[0].SnapshotID)
	}
	t.Logf("run %s: waited %s, split train_rows %v, trained on %v rows = full day %d, ready %+v", res.ID,
		res.Ready[0].At.Sub(res.StartedAt).Round(time.Millisecond), split.Outputs["train_rows"], node(t, res, "train").Outputs["train_rows"], fullDay, res.Ready[0])
}

// TestWaitForDeadline waits for a day whose rows never land: with the
// default on_deadline the run fails with DataNotReady, naming the
// condition and what it last saw; with on_deadline: skip it ends skipped.
// A table the lake lacks fails the run at its first check.
func TestWaitForDeadline(t *testing.T) {
	parallel(t)
	deadline := waitEnvSeconds(t, "RETRAIN_TEST_WAIT_DEADLINE_S", 3)
	l := newTestLake(t)
	specFor := func(table, onDeadline string, deadline time.Duration) []byte {
		return fmt.Appendf(nil, `
name: never_lands
wait_for:
  - {table: %s, deadline: %ds, poll: 1s, on_deadline: %s}
nodes:
  - {id: work, type: noop}
`, table, int(deadline.Seconds()), onDeadline)
	}
	spec := func(table, onDeadline string) []byte { return specFor(table, onDeadline, deadline) }
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// start runs a spec and returns its result, and the error Temporal
	// closed the run with (nil when it completed).
	start := func(s []byte) (*runs.Result, error) {
		run, err := runs.Start(ctx, tclient, runs.Request{Spec: s, SpecFile: "never.yaml", TaskQueue: l.queue, LogicalDate: "2026-11-20"})
		if err != nil {
			t.Fatal(err)
		}
		res, err := runs.Wait(ctx, tclient, run.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res, tclient.GetWorkflow(ctx, run.ID, "").Get(ctx, nil)
	}

	res, err := start(spec("ml.training", "fail"))
	wantStatus(t, res, runs.StatusFailed)
	t.Logf("fail: %s", res.Error)
	if !strings.Contains(res.Error, "wait_for table ml.training did not hold within its deadline") ||
		!strings.Contains(res.Error, "last check: ml.training has no rows for 2026-11-20") {
		t.Errorf("error %q", res.Error)
	}
	var appErr *temporal.ApplicationError
	found := false
	for e := error(err); e != nil; e = errors.Unwrap(e) {
		if errors.As(e, &appErr) && appErr.Type() == errtype.DataNotReady {
			found = true
		}
	}
	if !found {
		t.Errorf("no DataNotReady error in %v", err)
	}
	if took := res.EndedAt.Sub(res.StartedAt); took < deadline || took > deadline+20*time.Second {
		t.Errorf("failed after %s, want about the %s deadline", took, deadline)
	}

	res, err = start(spec("ml.training", "skip"))
	if err != nil {
		t.Errorf("a skipped run completes, got %v", err)
	}
	t.Logf("skip: %s: %s", res.Status, res.Error)
	wantStatus(t, res, runs.StatusSkipped)
	if n := node(t, res, "work"); n.Status != runs.NodeSkipped || !strings.Contains(n.Reason, "data not ready") {
		t.Errorf("work: %s %q", n.Status, n.Reason)
	}

	// A deadline of a minute: the run must fail at its first check, long
	// before it, even on a loaded machine.
	res, _ = start(specFor("ml.nosuch", "fail", time.Minute))
	wantStatus(t, res, runs.StatusFailed)
	t.Logf("no such table: %s", res.Error)
	if !strings.Contains(res.Error, "wait_for table ml.nosuch: the lake has no such table") || res.EndedAt.Sub(res.StartedAt) >= 30*time.Second {
		t.Errorf("missing table: %q after %s", res.Error, res.EndedAt.Sub(res.StartedAt))
	}
}

// TestWaitForWorkerKilled kills the only worker while a run waits for
// its files; a new worker picks the run up where it was (its timer is in
// history) and the run starts its node once the files land.
func TestWaitForWorkerKilled(t *testing.T) {
	parallel(t)
	queue := newQueue(t)
	dir := t.TempDir()
	spec := fmt.Sprintf(`
name: waits_for_files
wait_for:
  - {files: "%s/${run.logical_date}/*.csv", marker: _SUCCESS, deadline: 2m, poll: 1s}
nodes:
  - {id: work, type: command, with: {argv: [sh, -c, "cat %s/2026-11-27/*.csv"]}}
`, dir, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first := startChildWorker(t, queue)
	run, err := runs.Start(ctx, tclient, runs.Request{Spec: []byte(spec), SpecFile: "files.yaml", TaskQueue: queue, LogicalDate: "2026-11-27"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, func() bool {
		st, err := runs.State(ctx, tclient, run.ID)
		return err == nil && st.Status == runs.StatusWaiting && len(st.Waiting) == 1 && st.Waiting[0].Checks >= 2
	})
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	killedAt := time.Now()
	day := filepath.Join(dir, "2026-11-27")
	if err := os.MkdirAll(day, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(day, "part-0.csv"), []byte("rows\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	startChildWorker(t, queue)
	// The file without its marker is not ready: the new worker goes on waiting.
	waitFor(t, time.Minute, func() bool {
		st, err := runs.State(ctx, tclient, run.ID)
		return err == nil && st.Status == runs.StatusWaiting && strings.Contains(st.Waiting[0].Saw, "has no _SUCCESS")
	})
	if err := os.WriteFile(filepath.Join(day, "_SUCCESS"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := runs.Wait(ctx, tclient, run.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, runs.StatusSucceeded)
	if n := node(t, res, "work"); n.Outputs["stdout"] != "rows" || n.StartedAt.Before(killedAt) {
		t.Errorf("work: %+v", n)
	}
	t.Logf("ready after the kill: %+v", res.Ready)
}

// TestWaitForBackfill backfills a pipeline that waits for its files over
// three dates, one of which has none yet: two runs finish, and the third
// lists as WAITING, saying for what, until its files land.
func TestWaitForBackfill(t *testing.T) {
	parallel(t)
	queue, dir := newQueue(t), t.TempDir()
	pipeline := "waits-backfill-" + fmt.Sprint(time.Now().UnixNano()%1e6)
	spec := fmt.Sprintf(`
name: %s
wait_for:
  - {files: "%s/${run.logical_date}/*.csv", marker: _SUCCESS, deadline: 2m, poll: 1s}
nodes:
  - {id: work, type: command, with: {argv: [echo, "${run.logical_date}"]}}
`, pipeline, dir)
	w := startWorkerWith(t, worker.Config{TaskQueue: queue, MetricsAddr: "127.0.0.1:0", Pipelines: fstest.MapFS{pipeline + ".yaml": {Data: []byte(spec)}}})
	land := func(date string) {
		day := filepath.Join(dir, date)
		if err := os.MkdirAll(day, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"part-0.csv", "_SUCCESS"} {
			if err := os.WriteFile(filepath.Join(day, f), []byte("x\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	land("2026-11-01")
	land("2026-11-02")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan schedules.DateRun, 3)
	go func() {
		_, _ = schedules.BackfillDates(ctx, tclient, schedules.DateRequest{Pipeline: pipeline, From: "2026-11-01", To: "2026-11-03",
			MaxParallel: 3, TaskQueue: queue}, func(r schedules.DateRun) { done <- r })
	}()
	for range 2 {
		r := <-done
		if r.Err != nil || r.Result.Status != runs.StatusSucceeded || r.Date == "2026-11-03" {
			t.Fatalf("%s: %+v", r.Date, r)
		}
		t.Logf("%s: %s", r.Date, r.Result.Status)
	}
	var waiting runs.RunInfo
	waitFor(t, time.Minute, func() bool {
		list, err := runs.List(ctx, tclient, runs.ListOptions{Pipeline: pipeline, Namespace: server.Namespace()})
		if err != nil {
			return false
		}
		for _, r := range list {
			if r.LogicalDate == "2026-11-03" && r.Status == runs.StatusWaiting && r.Waiting != "" {
				waiting = r
				return true
			}
		}
		return false
	})
	var b strings.Builder
	list, _ := runs.List(ctx, tclient, runs.ListOptions{Pipeline: pipeline, Namespace: server.Namespace()})
	cli.PrintRuns(&b, list, time.Now())
	t.Logf("runs list:\n%s", b.String())
	if !strings.Contains(waiting.Waiting, "no files match "+dir+"/2026-11-03/*.csv") {
		t.Errorf("waiting: %q", waiting.Waiting)
	}
	select {
	case r := <-done:
		t.Fatalf("the third run ended before its data landed: %+v", r)
	default:
	}
	land("2026-11-03")
	r := <-done
	if r.Err != nil || r.Result.Status != runs.StatusSucceeded || r.Date != "2026-11-03" {
		t.Fatalf("third: %+v", r)
	}
	// Three waits ended ready: the wait-time histogram counts them.
	resp, err := http.Get("http://" + w.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	want := regexp.MustCompile(`(?m)^retrain_data_wait_seconds_count\{[^}]*outcome="ready",pipeline="` + pipeline + `"[^}]*\} 3$`)
	if !want.Match(body) {
		var lines []string
		for _, l := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(l, "retrain_data_wait") {
				lines = append(lines, l)
			}
		}
		t.Errorf("metrics lack %s; have:\n%s", want, strings.Join(lines, "\n"))
	}
}
