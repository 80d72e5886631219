//go:build linux

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/retrain-ml/retrain/dags/examples"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/temporalconn"
)

// The SIGKILL fault suite: the whole `retrain dev`
// stack (Temporal server, worker, S3 child) is SIGKILLed while one node of
// ctr-retrain is mid-flight, restarted on the same data dir and ports, and
// the run must complete without redoing what had finished, with one
// ml.training snapshot for its promotion and one registry version for its
// deploy. Each point gets a fresh data dir; the stack is the real binary,
// built once.
//
// The nodes are fast (promote ~0.5 s, train ~0.6 s, deploy ~0.1 s), so the
// kill is triggered by what the node itself does, not by polling Temporal
// (a pending activity shows up too late to catch a 100 ms node):
//   - promote: the first new data file in ml.training's data folder (the
//     bucket activities write them; the commit comes after all of them);
//   - train: the first checkpoint object the trainer writes (step 20 of ~44);
//   - deploy: its webhook call, which a test HTTP server holds open; the
//     deploy has registered the version and moved the alias by then.
// The history then proves where the kill landed: the nodes completed
// before it are exactly the expected ones and the killed node's work ran
// a second attempt.

// killPoint is one place of ctr-retrain to kill the stack at.
type killPoint struct {
	node   string   // mid-flight at the kill
	before []string // the nodes completed before the kill
	// arm starts watching for the moment node is mid-flight; the channel
	// is closed then.
	arm func(t *testing.T, k *killEnv) <-chan struct{}
}

var ctrNodes = []string{"stage_user", "stage_ad", "stats_user", "stats_ad", "promote", "split", "train", "evaluate", "gate", "deploy", "smoke"}

var killPoints = []killPoint{
	{node: "promote", before: ctrNodes[:4], arm: armPromote},
	{node: "train", before: ctrNodes[:6], arm: armTrain},
	{node: "deploy", before: ctrNodes[:9], arm: armDeploy},
}

// killHeartbeat replaces ctr-retrain's 30 s heartbeat timeout: a killed
// attempt is retried once its heartbeat is overdue, and three 30 s waits
// would triple the suite's time. Long enough for a busy 2-core machine.
const killHeartbeat = "10s"

func TestKillStack(t *testing.T) {
	parallelFor(t, 45*time.Second)
	if testing.Short() {
		t.Skip("builds and runs the retrain binary three times")
	}
	// The short form kills at train alone: the point that proves the most
	// at once (the nodes before it kept their results, the promotion left
	// one snapshot, the retried attempt resumed from a checkpoint written
	// before the kill, the deploy after it registered one version). The
	// long form kills at every point.
	points := killPoints
	if !longTests(t) {
		points = []killPoint{killPointAt(t, "train")}
		t.Logf("kill points: train (of %d)", len(killPoints))
	}
	bin := buildRetrain(t)
	for _, p := range points {
		t.Run(p.node, func(t *testing.T) { runKillPoint(t, bin, p) })
	}
}

// killPointAt is the kill point at node.
func killPointAt(t *testing.T, node string) killPoint {
	t.Helper()
	for _, p := range killPoints {
		if p.node == node {
			return p
		}
	}
	t.Fatalf("no kill point at %s", node)
	return killPoint{}
}

func runKillPoint(t *testing.T, bin string, p killPoint) {
	k := newKillEnv(t, bin)
	k.startDev(t)
	k.cli(t, "data", "demo", "--data-dir", k.dir, "--rows", "30000", "--days", "4")
	before := k.snapshots(t)
	spec := k.spec(t)

	c := k.dial(t)
	fired := p.arm(t, k)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	id := "killstack-" + p.node
	started := time.Now()
	if _, err := runs.Start(ctx, c, runs.Request{ID: id, Spec: spec, SpecFile: "ctr-retrain.yaml"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-fired:
	case <-time.After(time.Minute):
		res, err := runs.State(ctx, c, id)
		t.Fatalf("%s never got mid-flight in a minute (state %+v, %v)", p.node, res, err)
	}
	c.Close()
	killAt, killed := k.kill(t)

	restart := time.Now()
	k.startDev(t)
	ready := time.Since(restart)
	c = k.dial(t)
	defer c.Close()
	res, err := runs.Wait(ctx, c, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := time.Since(restart)
	wantStatus(t, res, runs.StatusSucceeded)

	// Not redone: every node ran to completion once, and those that had
	// completed before the kill kept that result (one attempt, ended
	// before the kill).
	nodes := nodeHistory(t, c, id, "")
	var pre []string
	for _, n := range ctrNodes {
		h := nodes[n]
		if h == nil || h.scheduled != 1 || h.completed != 1 {
			t.Errorf("node %s: %+v in the history, want scheduled and completed once", n, h)
			continue
		}
		if h.completedAt.Before(killAt) {
			pre = append(pre, n)
			if st := node(t, res, n); st.Attempts != 1 || st.EndedAt == nil || !st.EndedAt.Before(killAt) {
				t.Errorf("node %s completed before the kill but reports attempts %d, ended %v (kill at %v)", n, st.Attempts, st.EndedAt, killAt)
			}
		}
	}
	if strings.Join(pre, ",") != strings.Join(p.before, ",") {
		t.Fatalf("nodes completed before the kill: %v, want %v: the kill did not land in %s", pre, p.before, p.node)
	}

	// The killed node's work was retried: the attempt the kill cut short
	// never completed. A promote_features node is a child workflow, whose
	// activities are the attempts.
	attempts := nodes[p.node].attempt
	if p.node == "promote" {
		child := nodeHistory(t, c, id+"/promote", "")
		attempts = 0
		for _, h := range child {
			attempts = max(attempts, h.attempt)
		}
		if out := node(t, res, "promote").Outputs; out["rounds"] != float64(1) {
			t.Errorf("promote took %v rounds, want 1 (a killed round is retried, not redone)", out["rounds"])
		}
	}
	if attempts < 2 {
		t.Errorf("%s: at most %d attempts of its work: the kill did not cut one short", p.node, attempts)
	}
	resumed, _ := node(t, res, "train").Outputs["resumed_from"].(float64)
	if p.node == "train" && resumed <= 0 {
		t.Errorf("train resumed from step %v, want the checkpoint written before the kill", resumed)
	}

	// One snapshot per promotion: the promotion's, on top of the one before.
	after := k.snapshots(t)
	newSnaps := len(after) - len(before)
	promoted := node(t, res, "promote").Outputs
	head := after[len(after)-1]
	if newSnaps != 1 || !head.Current || fmt.Sprint(head.ID) != promoted["snapshot_id"] ||
		head.ParentID == nil || fmt.Sprint(*head.ParentID) != promoted["previous_snapshot_id"] {
		t.Errorf("ml.training: %d new snapshots, head %+v; promote reported %v on %v", newSnaps, head, promoted["snapshot_id"], promoted["previous_snapshot_id"])
	}

	// One version per deploy, and production moved once, by this run.
	var list struct {
		Versions []models.Version `json:"versions"`
		Aliases  []models.Alias   `json:"aliases"`
	}
	k.cliJSON(t, &list, "model", "list", "ctr", "--json", "--data-dir", k.dir)
	var moves []models.Move
	k.cliJSON(t, &moves, "model", "history", "ctr", "--json", "--data-dir", k.dir)
	dep := node(t, res, "deploy").Outputs
	if len(list.Versions) != 1 || list.Versions[0].Version != "v1" || dep["version"] != "v1" {
		t.Errorf("registry holds %d versions (%+v), deploy reported %v: want v1 alone", len(list.Versions), list.Versions, dep["version"])
	}
	if len(moves) != 1 || moves[0].To != "v1" || moves[0].Actor.Run != id || dep["previous_version"] != "" || dep["moved"] != true {
		t.Errorf("production history %+v; deploy reported previous %q, moved %v: want one move to v1 by %s", moves, dep["previous_version"], dep["moved"], id)
	}
	if dep["webhooks_ok"] != float64(1) {
		t.Errorf("deploy's webhook: %v ok (%v)", dep["webhooks_ok"], dep["webhooks"])
	}

	t.Logf("figures: point=%s kill_after=%.2fs processes_killed=%d restart_ready=%.2fs restart_to_done=%.2fs killed_attempts=%d "+
		"done_before_kill=%d train_resumed_from=%.0f new_snapshots=%d versions=%d production_moves=%d webhook_calls=%d",
		p.node, killAt.Sub(started).Seconds(), killed, ready.Seconds(), done.Seconds(), attempts,
		len(pre), resumed, newSnaps, len(list.Versions), len(moves), k.hookCalls.Load())
}

// armPromote fires at the first data file ml.training gains: the
// promotion's bucket activities write them before its one commit.
func armPromote(t *testing.T, k *killEnv) <-chan struct{} {
	dir := filepath.Join(k.dir, "warehouse", "ml.db", "training", "data")
	files := func() map[string]bool {
		seen := map[string]bool{}
		_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(path, ".parquet") {
				seen[path] = true
			}
			return nil
		})
		return seen
	}
	old := files()
	if len(old) == 0 {
		t.Fatalf("no data files under %s: the lake layout changed", dir)
	}
	return k.watch(t, func() bool {
		for f := range files() {
			if !old[f] {
				return true
			}
		}
		return false
	})
}

// armTrain fires at the first checkpoint the train node writes to the
// stack's S3 server (objects are files there).
func armTrain(t *testing.T, k *killEnv) <-chan struct{} {
	pattern := filepath.Join(k.dir, "s3", "data", "retrain", "checkpoints", "ctr-retrain", "killstack-train", "train", "*", "training", "step-*.ckpt")
	return k.watch(t, func() bool {
		m, _ := filepath.Glob(pattern)
		return len(m) > 0
	})
}

// armDeploy fires when the deploy calls its webhook, which is then held
// open until the kill cuts the connection.
func armDeploy(t *testing.T, k *killEnv) <-chan struct{} {
	k.holdHook.Store(true)
	return k.hookFired
}

// killEnv is one point's data dir, ports, dev stack process and webhook.
type killEnv struct {
	bin, dir, logPath        string
	port, s3Port, reportPort int
	dev                      *devProc
	hook                     *httptest.Server
	holdHook                 atomic.Bool
	hookCalls                atomic.Int64
	hookFired                chan struct{}
	hookOnce                 sync.Once
	stopWatch                chan struct{}
}

func newKillEnv(t *testing.T, bin string) *killEnv {
	k := &killEnv{bin: bin, dir: t.TempDir(), hookFired: make(chan struct{}), stopWatch: make(chan struct{})}
	ports := freePorts(t, 3)
	k.port, k.s3Port, k.reportPort = ports[0], ports[1], ports[2]
	k.logPath = filepath.Join(t.TempDir(), "dev.log")
	quit := make(chan struct{})
	k.hook = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k.hookCalls.Add(1)
		if k.holdHook.CompareAndSwap(true, false) {
			k.hookOnce.Do(func() { close(k.hookFired) })
			select { // until the kill drops the connection
			case <-r.Context().Done():
			case <-quit:
			}
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(k.hook.Close)
	t.Cleanup(func() { close(quit); close(k.stopWatch) })
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(k.logPath)
			t.Logf("retrain dev output:\n%s", tail(string(b), 8000))
		}
	})
	return k
}

// spec is ctr-retrain as shipped, with a shorter heartbeat timeout and a
// webhook on the deploy.
func (k *killEnv) spec(t *testing.T) []byte {
	t.Helper()
	b, err := examples.FS.ReadFile("ctr-retrain.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, r := range [][2]string{
		{"\n  timeout: 1h\n", "\n  timeout: 1h\n  heartbeat: " + killHeartbeat + "\n"},
		{"\n    heartbeat: 30s\n", "\n    heartbeat: " + killHeartbeat + "\n"},
		{"\n      reason: \"gate passed: ${nodes.gate.outputs.reason}\"\n",
			"\n      reason: \"gate passed: ${nodes.gate.outputs.reason}\"\n      webhooks: [\"" + k.hook.URL + "/deployed\"]\n"},
	} {
		if strings.Count(s, r[0]) != 1 {
			t.Fatalf("ctr-retrain.yaml no longer holds %q once: update killstack_test.go", r[0])
		}
		s = strings.Replace(s, r[0], r[1], 1)
	}
	return []byte(s)
}

// watch polls cond every few milliseconds until it holds (the returned
// channel is closed then) or the test ends.
func (k *killEnv) watch(t *testing.T, cond func() bool) <-chan struct{} {
	fired := make(chan struct{})
	go func() {
		tick := time.NewTicker(3 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-k.stopWatch:
				return
			case <-tick.C:
				if cond() {
					close(fired)
					return
				}
			}
		}
	}()
	return fired
}

func (k *killEnv) startDev(t *testing.T) {
	t.Helper()
	k.dev = startDevProc(t, k.logPath, k.bin, "dev", "--headless", "--data-dir", k.dir,
		"--port", fmt.Sprint(k.port), "--http-port", "0", "--s3-port", fmt.Sprint(k.s3Port), "--report-port", fmt.Sprint(k.reportPort), "--log-level", "warn")
}

// kill SIGKILLs the dev stack and everything it started, and returns when
// all of it is gone: when the kill was sent and how many processes it
// took (at least the stack and its S3 server).
func (k *killEnv) kill(t *testing.T) (time.Time, int) {
	t.Helper()
	at := time.Now()
	n, err := k.dev.killAll()
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Fatalf("the kill took %d processes: the S3 server child was not among them", n)
	}
	return at, n
}

func (k *killEnv) dial(t *testing.T) client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := temporalconn.Options{Address: fmt.Sprintf("127.0.0.1:%d", k.port), Namespace: "default"}.Dial(ctx, quiet)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// cli runs the retrain binary and returns its standard output.
func (k *killEnv) cli(t *testing.T, args ...string) string {
	t.Helper()
	out, err := runBinary(k.bin, time.Minute, args...)
	if err != nil {
		t.Fatalf("retrain %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func (k *killEnv) cliJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	if out := k.cli(t, args...); json.Unmarshal([]byte(out), v) != nil {
		t.Fatalf("retrain %s printed no JSON: %s", strings.Join(args, " "), out)
	}
}

// snapshots lists ml.training's snapshots, oldest first.
func (k *killEnv) snapshots(t *testing.T) []lake.SnapshotInfo {
	t.Helper()
	var s []lake.SnapshotInfo
	k.cliJSON(t, &s, "table", "snapshots", "ml.training", "--json", "--data-dir", k.dir)
	if len(s) == 0 {
		t.Fatal("ml.training has no snapshots")
	}
	return s
}

// nodeRecord is what a workflow history says about one node (or one
// activity of a child workflow, by activity id).
type nodeRecord struct {
	scheduled, completed int
	attempt              int32 // the attempt that completed
	completedAt          time.Time
}

// nodeHistory reads workflow id's history: its activities by activity id
// and its child workflows by the part of their id after the last "/".
func nodeHistory(t *testing.T, c client.Client, id, runID string) map[string]*nodeRecord {
	t.Helper()
	recs := map[string]*nodeRecord{}
	get := func(name string) *nodeRecord {
		if recs[name] == nil {
			recs[name] = &nodeRecord{}
		}
		return recs[name]
	}
	scheduled := map[int64]string{}
	attempts := map[int64]int32{}
	child := func(wfID string) string { return wfID[strings.LastIndex(wfID, "/")+1:] }
	iter := c.GetWorkflowHistory(context.Background(), id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		e, err := iter.Next()
		if err != nil {
			t.Fatalf("history of %s: %v", id, err)
		}
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			a := e.GetActivityTaskScheduledEventAttributes()
			scheduled[e.GetEventId()] = a.GetActivityId()
			get(a.GetActivityId()).scheduled++
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			a := e.GetActivityTaskStartedEventAttributes()
			attempts[a.GetScheduledEventId()] = a.GetAttempt()
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			a := e.GetActivityTaskCompletedEventAttributes()
			r := get(scheduled[a.GetScheduledEventId()])
			r.completed++
			r.attempt = max(r.attempt, attempts[a.GetScheduledEventId()])
			r.completedAt = e.GetEventTime().AsTime()
		case enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
			get(child(e.GetStartChildWorkflowExecutionInitiatedEventAttributes().GetWorkflowId())).scheduled++
		case enumspb.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED:
			r := get(child(e.GetChildWorkflowExecutionCompletedEventAttributes().GetWorkflowExecution().GetWorkflowId()))
			r.completed++
			r.attempt = max(r.attempt, 1)
			r.completedAt = e.GetEventTime().AsTime()
		}
	}
	return recs
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
