package integration

import (
	"archive/tar"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/encoding/protojson"

	gatenode "github.com/retrain-ml/retrain/activities/gate"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/workflows"
)

// The upgrade test builds the worker of the previous release from git and
// the worker of this tree, and hands a waiting run from one to the other
// (docs/upgrades.md).
const (
	upgradeData = "testdata/upgrade"
	// upgradeRevFile holds the previous release's commit, so that every
	// run of the test builds the same old worker.
	upgradeRevFile = upgradeData + "/REV"
	// upgradeRevEnv overrides it, to record another build's histories.
	upgradeRevEnv = "RETRAIN_UPGRADE_FROM"
	// releaseHistoriesEnv names a folder to write the old build's
	// histories to, under a folder named by its commit:
	// `RETRAIN_WRITE_RELEASE_HISTORIES=$PWD/workflows/testdata/releases`.
	releaseHistoriesEnv = "RETRAIN_WRITE_RELEASE_HISTORIES"
	// foreachCommit added foreach nodes; older builds cannot run that
	// scenario.
	foreachCommit = "7e5ff094303e562dc2a18f58fd6240892915128a"
)

// TestUpgradeWithRunsInFlight: a run waits at a gate on the previous
// release's worker; that worker is stopped (SIGTERM, then in a second run
// SIGKILL) and this tree's worker takes over; the approval goes to the new
// worker and the run completes, its workflow tasks handled by both builds. Before that, the previous build
// runs each interpreter path to completion and the histories it writes
// replay against this tree's workflow code.
func TestUpgradeWithRunsInFlight(t *testing.T) {
	parallelFor(t, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	root := repoRoot(t)
	rev := upgradeRev(t, root)
	dir := t.TempDir()

	oldBin, oldBuild := buildOldWorker(t, root, rev, filepath.Join(dir, "old"))
	newBin := treeBinary(t, "./cmd/retrain-worker")
	oldSum, newSum := fileMD5(t, oldBin), fileMD5(t, newBin)
	t.Logf("old worker: %s built in %.1fs (md5 %s); new worker: this tree's (md5 %s)",
		rev[:12], oldBuild.Seconds(), oldSum, newSum)
	if oldSum == newSum {
		t.Fatalf("the old and the new worker are the same binary: is %s this tree?", rev)
	}

	scenarios := []string{"upgrade-plain", "upgrade-compensation", "upgrade-gate"}
	if isAncestor(root, foreachCommit, rev) {
		scenarios = append(scenarios, "upgrade-foreach")
	}
	pipelines := pipelinesFor(t, filepath.Join(dir, "pipelines"), scenarios)

	t.Run("previous build's histories replay", func(t *testing.T) {
		queue := newQueue(t)
		startWorkerBinary(t, oldBin, queue, pipelines, filepath.Join(dir, "old-data"))
		replayer := sdkworker.NewWorkflowReplayer()
		workflows.Register(replayer)
		replayer.RegisterWorkflowWithOptions(gatenode.Gate, workflow.RegisterOptions{Name: gatenode.GateWorkflow})
		out := os.Getenv(releaseHistoriesEnv)
		if out != "" {
			out = filepath.Join(out, rev[:12])
			if err := os.MkdirAll(out, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for _, name := range scenarios {
			id := runScenario(ctx, t, queue, name)
			for file, hist := range histories(ctx, t, id, name) {
				if err := replayer.ReplayWorkflowHistoryWithOptions(nil, hist, asRecorded(hist)); err != nil {
					t.Errorf("%s: %s recorded by %s does not replay on this tree: %v", name, file, rev[:12], err)
				}
				if out != "" {
					writeHistory(t, filepath.Join(out, file), hist)
				}
			}
		}
	})

	// A rolling update stops the old pod with SIGTERM (the SDK tells the
	// server, which hands the run's next task elsewhere at once); a crash
	// or an eviction past its grace period is a SIGKILL (the server waits
	// out the sticky timeout first). Either way, no drain.
	for _, stop := range []struct {
		name string
		sig  syscall.Signal
	}{{"SIGTERM", syscall.SIGTERM}, {"SIGKILL", syscall.SIGKILL}} {
		t.Run("gate approved after the upgrade, old worker stopped by "+stop.name, func(t *testing.T) {
			handOff(ctx, t, oldBin, newBin, pipelines, dir, stop.name, stop.sig)
		})
	}
}

// handOff starts a run that waits at a gate on the old worker, stops that
// worker with stop, starts the new one, approves the gate there and checks
// that the run completes with workflow tasks of both builds.
func handOff(ctx context.Context, t *testing.T, oldBin, newBin, pipelines, dir, name string, stop syscall.Signal) {
	queue := newQueue(t)
	old := startWorkerBinary(t, oldBin, queue, pipelines, filepath.Join(dir, "old-data"))
	run, err := runs.Start(ctx, tclient, runs.Request{Pipeline: "upgrade-gate", TaskQueue: queue})
	if err != nil {
		t.Fatal(err)
	}
	gateID := run.ID + "/gate"
	waitFor(t, time.Minute, func() bool { return gateWaiting(ctx, gateID) })
	waitingAt := time.Now()

	if err := old.Process.Signal(stop); err != nil {
		t.Fatal(err)
	}
	_ = old.Wait()
	started := time.Now()
	replacement := startWorkerBinary(t, newBin, queue, pipelines, filepath.Join(dir, "new-data"))

	out, err := retrainCLI(t, "approve", run.ID, "--force", "--reason", "approved after the upgrade", "--user", "upgrade-test")
	if err != nil || !strings.Contains(out, "upgrade-test") {
		t.Fatalf("approve on the new worker: %v\n%s", err, out)
	}
	approvedAt := time.Now()
	res, err := runs.Wait(ctx, tclient, run.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	completed := time.Since(started)
	wantStatus(t, res, runs.StatusSucceeded)
	g := node(t, res, "gate").Outputs
	if g["passed"] != true || g["forced"] != true || g["forced_by"] != "upgrade-test" || g["waited"] != true {
		t.Fatalf("gate outputs %v", g)
	}
	if d := node(t, res, "deploy"); d.Status != runs.NodeSucceeded || d.Outputs["deployed"] != "cand-upgrade" {
		t.Fatalf("deploy %s %v: %s", d.Status, d.Outputs, d.Reason)
	}

	builds := map[string]string{pidPrefix(old): "old", pidPrefix(replacement): "new"}
	gateTasks := taskBuilds(t, history(t, tclient, gateID), builds)
	runTasks := taskBuilds(t, history(t, tclient, run.ID), builds)
	// The gate's wait started on the old build and ended on the new: the
	// approval's workflow task is the new build's, which replayed the old
	// build's commands before it without failing.
	if gateTasks.byBuild["old"] == 0 || gateTasks.byBuild["new"] == 0 || gateTasks.firstNewAfter != "update accepted" {
		t.Fatalf("gate workflow tasks: %+v, want the old build's before the approval and the new build's from the approval on", gateTasks)
	}
	if runTasks.byBuild["old"] == 0 || runTasks.byBuild["new"] == 0 {
		t.Fatalf("run workflow tasks: %+v, want both builds'", runTasks)
	}
	for _, h := range []taskSummary{gateTasks, runTasks} {
		if h.failed > 0 || h.other > 0 {
			t.Fatalf("workflow tasks failed (%d) or were handled by an unknown worker (%d): %+v", h.failed, h.other, h)
		}
	}
	t.Logf("%s: old worker stopped %.2fs after the gate began waiting; new worker started; approval answered %.2fs and run completed %.2fs after its start (the gate waited %.2fs in all)",
		name, started.Sub(waitingAt).Seconds(), approvedAt.Sub(started).Seconds(), completed.Seconds(), approvedAt.Sub(waitingAt).Seconds())
	t.Logf("%s: workflow tasks completed: gate child old=%d new=%d, run old=%d new=%d; failed: %d",
		name, gateTasks.byBuild["old"], gateTasks.byBuild["new"], runTasks.byBuild["old"], runTasks.byBuild["new"], gateTasks.failed+runTasks.failed)
}

// runScenario runs a scenario pipeline on the queue's worker to its end
// and returns the run id. upgrade-gate waits for an approval, which it
// gets; upgrade-compensation fails and compensates.
func runScenario(ctx context.Context, t *testing.T, queue, name string) string {
	t.Helper()
	run, err := runs.Start(ctx, tclient, runs.Request{Pipeline: name, TaskQueue: queue})
	if err != nil {
		t.Fatal(err)
	}
	if name == "upgrade-gate" {
		waitFor(t, time.Minute, func() bool { return gateWaiting(ctx, run.ID+"/gate") })
		if out, err := retrainCLI(t, "approve", run.ID, "--force", "--reason", "recorded approval", "--user", "recorder"); err != nil {
			t.Fatalf("approve: %v\n%s", err, out)
		}
	}
	res, err := runs.Wait(ctx, tclient, run.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := runs.StatusSucceeded
	if name == "upgrade-compensation" {
		want = runs.StatusFailed
		if len(res.Compensations) != 1 || res.Compensations[0].Status != runs.NodeSucceeded {
			t.Fatalf("%s: compensations %+v", name, res.Compensations)
		}
	}
	if res.Status != want {
		t.Fatalf("%s: status %s, want %s: %s", name, res.Status, want, res.Error)
	}
	return run.ID
}

// histories returns a run's history and those of its child workflows
// (gate, foreach chunks), by the file name each is recorded under.
func histories(ctx context.Context, t *testing.T, id, name string) map[string]*historypb.History {
	t.Helper()
	out := map[string]*historypb.History{}
	var walk func(id, file string)
	walk = func(id, file string) {
		h := history(t, tclient, id)
		out[file+".json"] = h
		for _, ev := range h.Events {
			if a := ev.GetStartChildWorkflowExecutionInitiatedEventAttributes(); a != nil {
				child := a.GetWorkflowId()
				walk(child, file+"."+fileSafe(strings.TrimPrefix(child, id+"/")))
			}
		}
	}
	walk(id, name)
	if ctx.Err() != nil {
		t.Fatal(ctx.Err())
	}
	return out
}

// asRecorded replays a history under its own workflow id: the replayer's
// default id would change the ids of the child workflows the run started
// (RUN/NODE), and their commands would not match.
func asRecorded(h *historypb.History) sdkworker.ReplayWorkflowHistoryOptions {
	a := h.Events[0].GetWorkflowExecutionStartedEventAttributes()
	return sdkworker.ReplayWorkflowHistoryOptions{OriginalExecution: workflow.Execution{ID: a.GetWorkflowId(), RunID: a.GetOriginalExecutionRunId()}}
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

func fileSafe(s string) string { return strings.Trim(unsafeChars.ReplaceAllString(s, "-"), "-") }

func writeHistory(t *testing.T, path string, h *historypb.History) {
	t.Helper()
	b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// gateWaiting says whether the gate workflow id waits for an approval.
func gateWaiting(ctx context.Context, id string) bool {
	v, err := tclient.QueryWorkflow(ctx, id, "", gatenode.GateQuery)
	var st gatenode.GateState
	return err == nil && v.Get(&st) == nil && st.Waiting
}

// taskSummary counts a history's workflow tasks by the build whose worker
// completed them.
type taskSummary struct {
	byBuild map[string]int
	other   int // completed by a worker the test did not start
	failed  int // WorkflowTaskFailed: a nondeterminism error shows here
	// firstNewAfter is what the new build's first completed task led to:
	// "update accepted" when that task took the approval.
	firstNewAfter string
}

// taskBuilds reads which worker completed each workflow task of h; builds
// maps a worker identity's prefix ("PID@") to a build.
func taskBuilds(t *testing.T, h *historypb.History, builds map[string]string) taskSummary {
	t.Helper()
	s := taskSummary{byBuild: map[string]int{}}
	for i, ev := range h.Events {
		switch ev.GetEventType() {
		case enums.EVENT_TYPE_WORKFLOW_TASK_FAILED:
			s.failed++
		case enums.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			identity := ev.GetWorkflowTaskCompletedEventAttributes().GetIdentity()
			build := ""
			for prefix, b := range builds {
				if strings.HasPrefix(identity, prefix) {
					build = b
				}
			}
			if build == "" {
				s.other++
			}
			if build == "new" && s.byBuild["new"] == 0 && i+1 < len(h.Events) {
				s.firstNewAfter = h.Events[i+1].GetEventType().String()
				if h.Events[i+1].GetEventType() == enums.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED {
					s.firstNewAfter = "update accepted"
				}
			}
			s.byBuild[build]++
		}
	}
	return s
}

func pidPrefix(cmd *exec.Cmd) string { return fmt.Sprintf("%d@", cmd.Process.Pid) }

// startWorkerBinary starts a retrain-worker binary on queue, knowing the
// pipelines folder, until the test ends.
func startWorkerBinary(t *testing.T, bin, queue, pipelines, dataDir string) *exec.Cmd {
	t.Helper()
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--address", server.FrontendAddress(), "--namespace", server.Namespace(),
		"--task-queue", queue, "--pipelines", pipelines, "--data-dir", dataDir, "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	return cmd
}

// pipelinesFor copies the named scenario pipelines into dir.
func pipelinesFor(t *testing.T, dir string, names []string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(upgradeData, "pipelines", name+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".yaml"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// repoRoot is the root of the git checkout this test runs in. The test
// needs the history: without it, it fails and says so rather than skip,
// as a skipped upgrade test would let an unsafe change through.
func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").CombinedOutput()
	if err != nil {
		t.Fatalf("the upgrade test builds the previous release from git history, and this is no git checkout (%v: %s); run it in a clone of the repository", err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out))
}

// upgradeRev is the old worker's commit: $RETRAIN_UPGRADE_FROM, else the
// last non-comment line of testdata/upgrade/REV, as a full hash.
func upgradeRev(t *testing.T, root string) string {
	t.Helper()
	rev := os.Getenv(upgradeRevEnv)
	if rev == "" {
		b, err := os.ReadFile(upgradeRevFile)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				rev = line
			}
		}
	}
	if rev == "" {
		t.Fatalf("%s names no commit", upgradeRevFile)
	}
	cmd := exec.Command("git", "rev-parse", "--verify", "--quiet", rev+"^{commit}")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("commit %s (the previous release, %s) is not in this clone; a shallow clone lacks it: git fetch --unshallow", rev, upgradeRevFile)
	}
	return strings.TrimSpace(string(out))
}

func isAncestor(root, ancestor, rev string) bool {
	cmd := exec.Command("git", "merge-base", "--is-ancestor", ancestor, rev)
	cmd.Dir = root
	return cmd.Run() == nil
}

// buildOldWorker builds cmd/retrain-worker of commit rev into dir (the
// tree from git archive) and says how long that took; only the old tree's
// own packages compile, the rest comes from the build cache.
//
// The binary is kept in the user's cache folder under the commit and the
// Go toolchain that built it (a commit's tree never changes), so that only
// the first run on a machine pays for compiling a whole older tree.
func buildOldWorker(t *testing.T, root, rev, dir string) (string, time.Duration) {
	t.Helper()
	cached := ""
	if cache, err := os.UserCacheDir(); err == nil {
		cached = filepath.Join(cache, "retrain-integration", "worker-"+rev+"-"+runtime.Version()+"-"+runtime.GOOS+"-"+runtime.GOARCH, "retrain-worker")
		if fi, err := os.Stat(cached); err == nil && fi.Mode().IsRegular() {
			t.Logf("old worker %s: built before, kept in %s", rev[:12], filepath.Dir(cached))
			return cached, 0
		}
	}
	src := filepath.Join(dir, "src")
	if err := extractRev(root, rev, src); err != nil {
		t.Fatalf("check out %s: %v", rev, err)
	}
	bin, took := goBuild(t, src, "./cmd/retrain-worker", dir)
	if cached != "" {
		// Copied under a temporary name and renamed, so that a run in
		// parallel never starts a half-written binary.
		if err := os.MkdirAll(filepath.Dir(cached), 0o755); err == nil {
			tmp := cached + ".tmp" + strconv.Itoa(os.Getpid())
			if err := copyFile(bin, tmp); err == nil && os.Rename(tmp, cached) == nil {
				return cached, took
			}
			os.Remove(tmp)
		}
	}
	return bin, took
}

// copyFile copies the executable src to dst.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// extractRev writes the tree of commit rev into dir (git archive, read
// here so that no tar program is needed).
func extractRev(root, rev, dir string) error {
	cmd := exec.Command("git", "archive", "--format=tar", rev)
	cmd.Dir = root
	var stderr strings.Builder
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	untarErr := untar(pipe, dir)
	_, _ = io.Copy(io.Discard, pipe)
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("git archive: %w: %s", err, stderr.String())
	}
	return untarErr
}

func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		path := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(path, filepath.Clean(dir)+string(filepath.Separator)) {
			return fmt.Errorf("archive entry %q leaves the folder", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(path, 0o755)
		case tar.TypeReg:
			err = writeFileFrom(path, tr, os.FileMode(h.Mode)&0o777)
		case tar.TypeSymlink:
			if err = os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
				err = os.Symlink(h.Linkname, path)
			}
		} // git archive writes a pax header for the commit id: nothing to do
		if err != nil {
			return err
		}
	}
}

func writeFileFrom(path string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func fileMD5(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := md5.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}
