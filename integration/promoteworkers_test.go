package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	lakenodes "github.com/retrain-ml/retrain/activities/lake"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/runs"
)

// The promotion the workers share: enough rows that a bucket group lasts
// long enough to be caught running and killed (seconds, not
// milliseconds), split into more groups than the two workers have slots.
const (
	pwRows   = 240_000
	pwGroups = 8
	pwSlots  = 2 // group slots of each worker (--activity-concurrency): a 2-core host each
)

// TestPromoteAcrossWorkers promotes the same staged features into three
// identical copies of the training table, each through a real pipeline
// run on separate `retrain-worker` processes that share the lake: one
// SQLite catalog file and a warehouse on the S3 server (versitygw).
//
//  1. single: one worker process runs every bucket group; its snapshot's
//     checksum is the reference.
//  2. two workers: a second process joins the queue; the history shows
//     groups completed by both, and the checksum is the reference's.
//  3. one killed: the worker that has just started a group is SIGKILLed;
//     that group times out on its heartbeat and is redone by the other
//     worker, and the table gets exactly one new snapshot, whose checksum
//     is the reference's.
//
// It logs the figures docs/scaling.md models throughput with: groups per
// worker, per-group time, rows and join time, plan and commit time, and
// how long the killed group took to move.
// pwHeartbeat is the promote node's heartbeat timeout: shorter than
// promote_features' 30 s cap so the killed group moves within ~10 s.
const pwHeartbeat = "10s"

func TestPromoteAcrossWorkers(t *testing.T) {
	parallelFor(t, 50*time.Second)
	if testing.Short() {
		t.Skip("builds retrain-worker and starts an S3 server and two worker processes")
	}
	e := newSharedLake(t)
	bin := treeBinary(t, "./cmd/retrain-worker")
	a := e.startWorker(t, bin, "A")

	// 1. One worker: the reference.
	single := e.promote(t, "ml.training", nil)
	for _, g := range single.groups {
		if g.identity != a.identity {
			t.Fatalf("single: group %v completed by %s, want worker A (%s)", g.buckets, g.identity, a.identity)
		}
	}
	want := e.checksum(t, "ml.training")
	t.Logf("single: checksum %s (%d rows, %d columns)", want.Digest, want.Rows, len(want.Columns))

	// 2. Two workers on the queue.
	b := e.startWorker(t, bin, "B")
	two := e.promote(t, "ml.training_two", nil)
	per := two.perWorker()
	if per[a.identity] == 0 || per[b.identity] == 0 {
		t.Errorf("two workers: groups per worker %v: want both A (%s) and B (%s) to take groups", per, a.identity, b.identity)
	}
	e.wantChecksum(t, "two workers", "ml.training_two", want)

	// 3. Kill the worker that has just started a group.
	var killed killRecord
	three := e.promote(t, "ml.training_kill", func(ctx context.Context, childID string) {
		killed = e.killOnStartedGroup(t, ctx, childID, lakenodes.PromoteBucketsActivity, a, b)
	})
	wantRedoneBySurvivor(t, three.groups, killed, a, b)
	e.wantChecksum(t, "killed", "ml.training_kill", want)
	t.Logf("killed: %d Parquet objects under the table written by no committed snapshot (the killed attempt's files, left for a cleanup)", e.orphans(t, "ml.training_kill"))

	for _, r := range []struct {
		name string
		h    *promotionRun
	}{{"single", single}, {"two workers", two}, {"one killed", three}} {
		r.h.log(t, r.name, map[string]string{a.identity: "A", b.identity: "B"})
	}
}

// sharedLake is the lake the worker processes share: a SQLite catalog file
// (one host) and a warehouse on a real S3 server, with the demo tables,
// two copies of the training table and its two staging tables.
type sharedLake struct {
	srv     *s3test.Server
	cfg     lake.Config
	cat     *lake.Catalog
	queue   string
	staging []string
	// stagingBytes is the size of the staging tables' data files, which
	// every promotion reads.
	stagingBytes int64
	// workerEnv is added to the worker processes' environment.
	workerEnv []string
	// start and end are the window of the demo data (demoStart..demoEnd
	// unless a test writes other data).
	start, end string
	// rows is the training table's rows.
	rows int64
}

func newSharedLake(t *testing.T) *sharedLake {
	t.Helper()
	return newSharedLakeOn(t, "file:"+filepath.Join(t.TempDir(), "catalog.db"))
}

// newSharedLakeOn is newSharedLake with the catalog at catalogURI (a
// SQLite file or a PostgreSQL database).
func newSharedLakeOn(t *testing.T, catalogURI string) *sharedLake {
	t.Helper()
	return newSharedLakeRows(t, catalogURI, pwRows)
}

// newSharedLakeRows is newSharedLakeOn with rows training rows.
func newSharedLakeRows(t *testing.T, catalogURI string, rows int64) *sharedLake {
	t.Helper()
	ctx := context.Background()
	e := &sharedLake{srv: s3test.Start(t), queue: newQueue(t), start: demoStart, end: demoEnd, rows: rows}
	e.cfg = lake.Config{
		URI: catalogURI, Warehouse: e.srv.URI("warehouse"),
		S3: lake.S3Config{Endpoint: e.srv.Endpoint, Region: e.srv.Region, AccessKeyID: e.srv.AccessKey, SecretAccessKey: e.srv.SecretKey},
	}
	cat, err := lake.Open(ctx, e.cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	e.cat = cat
	started := time.Now()
	if _, err := demodata.Write(ctx, cat, demodata.Config{Rows: rows, Days: demoDays, Seed: 13}, demodata.DefaultTables, false, quiet); err != nil {
		t.Fatal(err)
	}
	// The copies hold the very same data files: a promotion replaces
	// files in its own table's snapshot and deletes none, so they share
	// them safely, and the same staging tables fit all three.
	src, err := cat.Load(ctx, "ml.training")
	if err != nil {
		t.Fatal(err)
	}
	files, err := lake.FilesOf(ctx, src.Scan())
	if err != nil {
		t.Fatal(err)
	}
	spec, order := src.Spec(), src.SortOrder()
	for _, name := range []string{"ml.training_two", "ml.training_kill"} {
		if _, err := cat.CreateTable(ctx, name, src.Schema(), lake.TableSpec{Partition: &spec, SortOrder: &order}); err != nil {
			t.Fatal(err)
		}
		if _, err := cat.AddFiles(ctx, name, files, nil); err != nil {
			t.Fatal(err)
		}
	}
	base := e.checksum(t, "ml.training")
	for _, name := range []string{"ml.training_two", "ml.training_kill"} {
		if got := e.checksum(t, name); !sameChecksum(got, base) {
			t.Fatalf("copy %s: checksum %s, want ml.training's %s", name, got.Digest, base.Digest)
		}
	}
	for _, s := range []features.StageSpec{
		{Feature: "features.user_daily", Keys: []string{"user_id"}, Alignment: "previous_day", Prefix: "u_"},
		{Feature: "features.ad_daily", Keys: []string{"ad_id"}, Alignment: "as_of", Prefix: "a_"},
	} {
		s.Training, s.StartDate, s.EndDate = "ml.training", demoStart, demoEnd
		s.DateColumn, s.EventTimeColumn, s.FeatureTimeColumn, s.LookbackDays = "date", "event_ts", "ts", 7
		res, err := features.Stage(ctx, cat, s, quiet)
		if err != nil {
			t.Fatal(err)
		}
		e.staging = append(e.staging, res.Staging)
		for _, size := range e.files(t, res.Staging) {
			e.stagingBytes += size
		}
	}
	t.Logf("lake: %d training rows over %d days, 3 copies, 2 staging tables, on %s (%.1f s to set up)", rows, demoDays, e.cfg.Warehouse, time.Since(started).Seconds())
	return e
}

func (e *sharedLake) checksum(t *testing.T, name string) lake.Checksum {
	t.Helper()
	return tableChecksum(t, e.cat, name)
}

// files maps the data files of a table's current snapshot to their sizes.
func (e *sharedLake) files(t *testing.T, name string) map[string]int64 {
	t.Helper()
	tbl, err := e.cat.Load(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	files, err := lake.FilesOf(context.Background(), tbl.Scan())
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int64{}
	for _, f := range files {
		m[f.FilePath()] = f.FileSizeBytes()
	}
	return m
}

// wantChecksum checks that a table's checksum is the single worker's.
func (e *sharedLake) wantChecksum(t *testing.T, phase, name string, want lake.Checksum) {
	t.Helper()
	if got := e.checksum(t, name); !sameChecksum(got, want) {
		t.Errorf("%s: checksum %s (%d rows), want the single worker's %s (%d rows)", phase, got.Digest, got.Rows, want.Digest, want.Rows)
	} else {
		t.Logf("%s: checksum %s equals the single worker's", phase, got.Digest)
	}
}

func sameChecksum(a, b lake.Checksum) bool {
	return a.Digest == b.Digest && a.Rows == b.Rows && slices.Equal(a.Columns, b.Columns)
}

// orphans counts the Parquet objects under a table's location that its
// current snapshot does not reference.
func (e *sharedLake) orphans(t *testing.T, name string) int {
	t.Helper()
	tbl, err := e.cat.Load(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	live := e.files(t, name)
	prefix := strings.TrimPrefix(tbl.Location(), "s3://"+e.srv.Bucket+"/")
	n := 0
	for _, k := range e.srv.Keys(t) {
		if strings.HasPrefix(k, prefix+"/") && strings.HasSuffix(k, ".parquet") && live["s3://"+e.srv.Bucket+"/"+k] == 0 {
			n++
		}
	}
	return n
}

// workerProc is a retrain-worker process on the lake's queue.
type workerProc struct {
	name     string
	cmd      *exec.Cmd
	identity string // its Temporal identity, as histories record it
	log      string // its output file
	killed   bool
}

func (w *workerProc) pid() int { return w.cmd.Process.Pid }

// start starts w.cmd with its output in a file of the test's, and stops
// it when the test ends (SIGTERM unless it was killed), showing its
// output if the test failed.
func (w *workerProc) start(t *testing.T) {
	t.Helper()
	w.log = filepath.Join(t.TempDir(), "worker.log")
	out, err := os.Create(w.log)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close() // the child has its own copy
	w.cmd.Stdout, w.cmd.Stderr = out, out
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !w.killed {
			_ = w.cmd.Process.Signal(syscall.SIGTERM)
		}
		_ = w.cmd.Wait()
		if t.Failed() {
			t.Logf("worker %s output:\n%s", w.name, w.output())
		}
	})
}

func (w *workerProc) output() string {
	b, _ := os.ReadFile(w.log)
	return string(b)
}

// startWorker starts retrain-worker as a separately deployed worker would
// be: Temporal's frontend, the queue, the shared catalog and the S3
// warehouse by flags, the S3 credentials from the AWS environment.
func (e *sharedLake) startWorker(t *testing.T, bin, name string, extra ...string) *workerProc {
	t.Helper()
	w := &workerProc{name: name}
	w.cmd = exec.Command(bin,
		"--address", server.FrontendAddress(), "--namespace", server.Namespace(),
		"--task-queue", e.queue, "--allow-inline-specs",
		"--max-concurrent-activities", fmt.Sprint(pwSlots),
		"--activity-concurrency", fmt.Sprintf("promote_features=%d", pwSlots),
		"--catalog-uri", e.cfg.URI, "--warehouse", e.cfg.Warehouse,
		"--s3-endpoint", e.srv.Endpoint, "--s3-region", e.srv.Region,
		"--log-level", "warn")
	w.cmd.Args = append(w.cmd.Args, extra...)
	w.cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TMPDIR=" + t.TempDir(),
		"AWS_ACCESS_KEY_ID=" + e.srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + e.srv.SecretKey,
	}
	w.cmd.Env = append(w.cmd.Env, e.workerEnv...)
	w.start(t)
	// The SDK's default identity is "PID@HOST@"; wait for this process to
	// poll the queue before handing it work.
	prefix := fmt.Sprintf("%d@", w.pid())
	deadline := time.Now().Add(time.Minute)
	for w.identity == "" {
		if time.Now().After(deadline) {
			t.Fatalf("worker %s (pid %d) did not poll %s within a minute; output:\n%s", name, w.pid(), e.queue, w.output())
		}
		resp, err := tclient.DescribeTaskQueue(context.Background(), e.queue, enumspb.TASK_QUEUE_TYPE_ACTIVITY)
		if err == nil {
			for _, p := range resp.GetPollers() {
				if strings.HasPrefix(p.GetIdentity(), prefix) {
					w.identity = p.GetIdentity()
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return w
}

// signal sends w sig (SIGSTOP, SIGCONT).
func (w *workerProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := w.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

func (w *workerProc) kill(t *testing.T) {
	t.Helper()
	if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	w.killed = true
}

// killRecord says which worker was killed, in which group, when.
type killRecord struct {
	worker     *workerProc
	activityID string
	at         time.Time
}

// killOnStartedGroup SIGKILLs the first of the workers seen running a
// group activity (of type group) of the child workflow childID, choosing
// the group started last (the one with the most work left, so it cannot
// finish before the kill).
func (e *sharedLake) killOnStartedGroup(t *testing.T, ctx context.Context, childID, group string, workers ...*workerProc) killRecord {
	t.Helper()
	deadline := time.Now().Add(4 * time.Minute)
	for time.Now().Before(deadline) {
		if pick, ok := e.startedGroup(ctx, childID, group, workers); ok {
			// Freeze the worker, then look again: on a loaded machine the
			// group may have finished between the look and the kill, and a
			// kill after it finished tests nothing. A stopped worker cannot
			// complete a group, so one it still runs after the pause (which
			// lets a completion already sent land) is killed mid-group:
			// that group, or the next one the worker had taken meanwhile
			// (with many short groups, wanting the first one again missed
			// every time).
			pick.worker.signal(t, syscall.SIGSTOP)
			time.Sleep(500 * time.Millisecond)
			if again, ok := e.startedGroup(ctx, childID, group, []*workerProc{pick.worker}); ok {
				again.worker.kill(t)
				again.at = time.Now()
				return again
			}
			pick.worker.signal(t, syscall.SIGCONT)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no worker was seen running a %s activity of %s within 4 minutes", group, childID)
	return killRecord{}
}

// startedGroup is the group activity of childID that one of workers
// started last and is still running, if any.
func (e *sharedLake) startedGroup(ctx context.Context, childID, group string, workers []*workerProc) (killRecord, bool) {
	desc, err := tclient.DescribeWorkflowExecution(ctx, childID, "")
	if err != nil {
		return killRecord{}, false
	}
	var pick killRecord
	var latest time.Time
	for _, pa := range desc.GetPendingActivities() {
		if pa.GetActivityType().GetName() != group || pa.GetState() != enumspb.PENDING_ACTIVITY_STATE_STARTED {
			continue
		}
		for _, w := range workers {
			if w.identity == pa.GetLastWorkerIdentity() && pa.GetLastStartedTime().AsTime().After(latest) {
				latest = pa.GetLastStartedTime().AsTime()
				pick = killRecord{worker: w, activityID: pa.GetActivityId()}
			}
		}
	}
	return pick, pick.worker != nil
}

// promote runs a promotion of the staged features into training through a
// pipeline run on the lake's queue and returns what its history says.
// during, if set, runs while the run does, given the promotion's child
// workflow id. It checks the run succeeded and the table got exactly one
// new snapshot, the promotion's.
func (e *sharedLake) promote(t *testing.T, training string, during func(ctx context.Context, childID string)) *promotionRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	before, err := e.cat.Load(ctx, training)
	if err != nil {
		t.Fatal(err)
	}
	beforeFiles := e.files(t, training)
	spec := fmt.Sprintf(`name: promote_across_workers
nodes:
  - id: promote
    type: promote_features
    heartbeat: %s
    with: {training_table: %s, staging_tables: [%s], start_date: %q, end_date: %q, bucket_groups: %d}
`, pwHeartbeat, training, strings.Join(e.staging, ", "), demoStart, demoEnd, pwGroups)
	run, err := runs.Start(ctx, tclient, runs.Request{Spec: []byte(spec), SpecFile: "promote_across_workers.yaml", TaskQueue: e.queue})
	if err != nil {
		t.Fatal(err)
	}
	// The Pipeline workflow starts each node's child workflow under the
	// run id and the node id.
	childID := run.ID + "/promote"
	if during != nil {
		during(ctx, childID)
	}
	res, err := runs.Wait(ctx, tclient, run.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, runs.StatusSucceeded)
	n := node(t, res, "promote")
	p := promotionHistory(t, ctx, childID)
	p.wall = n.EndedAt.Sub(*n.StartedAt)
	if len(p.groups) != pwGroups {
		t.Fatalf("%s: %d bucket groups completed, want %d", training, len(p.groups), pwGroups)
	}
	if n.Outputs["rows"] != float64(e.rows) {
		t.Errorf("%s: promoted %v rows, want %d", training, n.Outputs["rows"], e.rows)
	}

	after, err := e.cat.Load(ctx, training)
	if err != nil {
		t.Fatal(err)
	}
	// The promotion reads every training file of the range (here: all)
	// and the staging files, and writes the training rows anew.
	p.read = e.stagingBytes
	for _, size := range beforeFiles {
		p.read += size
	}
	for path, size := range e.files(t, training) {
		if _, old := beforeFiles[path]; !old {
			p.wrote += size
		}
	}
	snaps, prev := lake.Snapshots(after), lake.Snapshots(before)
	var mine []lake.SnapshotInfo
	for _, s := range snaps {
		if strings.HasPrefix(s.Summary[features.PropPromotionID], run.ID+"/") {
			mine = append(mine, s)
		}
	}
	if len(snaps) != len(prev)+1 || len(mine) != 1 || !mine[0].Current || fmt.Sprint(mine[0].ID) != n.Outputs["snapshot_id"] {
		t.Errorf("%s: %d snapshots before, %d after, %d of them this run's promotion (%v), node says %v: want exactly one new snapshot, current, the promotion's",
			training, len(prev), len(snaps), len(mine), mine, n.Outputs["snapshot_id"])
	}
	return p
}
