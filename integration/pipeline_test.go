package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/temporalconn"
)

func TestHelloByName(t *testing.T) {
	queue := newQueue(t)
	startWorker(t, queue)
	ctx := context.Background()
	run, err := runs.Start(ctx, tclient, runs.Request{Pipeline: "hello", TaskQueue: queue, Params: map[string]any{"who": "retrain"}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := runs.Wait(ctx, tclient, run.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, runs.StatusSucceeded)
	if got := node(t, res, "join").Outputs["stdout"]; got != "HELLO RETRAIN (13 chars, on Linux)" {
		t.Errorf("join stdout = %q", got)
	}
	if n := node(t, res, "long_greeting"); n.Status != runs.NodeSucceeded {
		t.Errorf("long_greeting: %s", n.Status)
	}

	// The run is findable in the UI by pipeline and params digest.
	query := fmt.Sprintf("RetrainPipeline = 'hello' AND RetrainParamsDigest = '%s'", res.ParamsDigest)
	waitFor(t, 15*time.Second, func() bool {
		resp, err := tclient.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: server.Namespace(), Query: query})
		if err != nil {
			t.Fatalf("list %q: %v", query, err)
		}
		for _, e := range resp.GetExecutions() {
			if e.GetExecution().GetWorkflowId() == run.ID {
				return true
			}
		}
		return false
	})
}

// TestTimeoutKillsProcessGroup lets a node run past its timeout and checks
// the attempt fails and every process it started is gone.
func TestTimeoutKillsProcessGroup(t *testing.T) {
	parallel(t)
	queue := newQueue(t)
	startWorker(t, queue)
	pidFile := filepath.Join(t.TempDir(), "pid")
	res := runSpec(t, queue, fmt.Sprintf(`
name: timeout
nodes:
  - id: stuck
    type: command
    timeout: 2s
    retry: {max_attempts: 1}
    with: {argv: ["sh", "-c", "sleep 300 & echo $! > %s; wait"]}
`, pidFile), nil)
	wantStatus(t, res, runs.StatusFailed)
	n := node(t, res, "stuck")
	if n.Status != runs.NodeFailed || !strings.Contains(strings.ToLower(n.Error), "timeout") {
		t.Errorf("stuck: %s %q", n.Status, n.Error)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return syscall.Kill(pid, 0) != nil })
}

// TestBranchesRunConcurrently checks two independent branches overlap in
// time, both in the result and in the server's own history events.
func TestBranchesRunConcurrently(t *testing.T) {
	queue := newQueue(t)
	startWorker(t, queue)
	res := runSpec(t, queue, `
name: branches
nodes:
  - {id: root, type: command, with: {argv: ["true"]}}
  - {id: left, type: command, needs: [root], with: {argv: ["sleep", "1"]}}
  - {id: right, type: command, needs: [root], with: {argv: ["sleep", "1"]}}
  - {id: join, type: command, needs: [left, right], with: {argv: ["true"]}}
`, nil)
	wantStatus(t, res, runs.StatusSucceeded)
	l, r := node(t, res, "left"), node(t, res, "right")
	if !l.StartedAt.Before(*r.EndedAt) || !r.StartedAt.Before(*l.EndedAt) {
		t.Errorf("branches did not overlap: left %v..%v, right %v..%v", l.StartedAt, l.EndedAt, r.StartedAt, r.EndedAt)
	}
	if total := res.EndedAt.Sub(res.StartedAt); total > 1900*time.Millisecond {
		t.Errorf("two 1 s branches took %v in all: not concurrent", total)
	}

	// The server's view: each branch's ActivityTaskStarted precedes the
	// other's ActivityTaskCompleted.
	started := map[int64]time.Time{} // scheduled event id -> started time
	names := map[int64]string{}
	var spans [][2]time.Time
	iter := tclient.GetWorkflowHistory(context.Background(), res.ID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			t.Fatal(err)
		}
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			names[ev.GetEventId()] = ev.GetActivityTaskScheduledEventAttributes().GetActivityId()
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			started[ev.GetActivityTaskStartedEventAttributes().GetScheduledEventId()] = ev.GetEventTime().AsTime()
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			id := ev.GetActivityTaskCompletedEventAttributes().GetScheduledEventId()
			if n := names[id]; n == "left" || n == "right" {
				spans = append(spans, [2]time.Time{started[id], ev.GetEventTime().AsTime()})
			}
		}
	}
	if len(spans) != 2 {
		t.Fatalf("found %d branch activities in history", len(spans))
	}
	if !spans[0][0].Before(spans[1][1]) || !spans[1][0].Before(spans[0][1]) {
		t.Errorf("history shows no overlap: %v", spans)
	}
}

func TestFlakyNodeShowsThreeAttempts(t *testing.T) {
	parallel(t)
	queue := newQueue(t)
	startWorker(t, queue)
	counter := filepath.Join(t.TempDir(), "count")
	res := runSpec(t, queue, fmt.Sprintf(`
name: flaky
defaults: {retry: {max_attempts: 5, initial_interval: 100ms, backoff: 1.0}}
nodes:
  - id: flaky
    type: command
    with:
      argv: ["sh", "-c", "n=$(cat %[1]s 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s; echo attempt $n; [ $n -ge 3 ]"]
`, counter), nil)
	wantStatus(t, res, runs.StatusSucceeded)
	n := node(t, res, "flaky")
	if n.Attempts != 3 {
		t.Errorf("attempts = %d, want 3", n.Attempts)
	}
	if n.Outputs["stdout"] != "attempt 3" {
		t.Errorf("stdout = %q", n.Outputs["stdout"])
	}
}

func TestCycleRejectedBeforeStart(t *testing.T) {
	spec := "name: cyc\nnodes:\n  - {id: a, type: command, needs: [b], with: {argv: [\"true\"]}}\n  - {id: b, type: command, needs: [a], with: {argv: [\"true\"]}}\n"
	file := filepath.Join(t.TempDir(), "cyc.yaml")
	if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	// The CLI refuses it without contacting the server.
	var out, errOut bytes.Buffer
	app := &cli.App{Out: &out, Err: &errOut}
	root := cli.NewRoot(app, "retrain")
	root.SetArgs([]string{"run", file, "--address", "127.0.0.1:1"})
	err := root.ExecuteContext(context.Background())
	if err == nil || !strings.Contains(err.Error(), "a -> b -> a") {
		t.Fatalf("CLI error %v does not print the cycle path", err)
	}
	if !strings.Contains(err.Error(), "cyc.yaml:") {
		t.Errorf("CLI error %v does not name the file", err)
	}

	// A run started past the CLI fails in the resolver, before any node.
	queue := newQueue(t)
	startWorker(t, queue)
	res := runSpec(t, queue, spec, nil)
	wantStatus(t, res, runs.StatusFailed)
	if !strings.Contains(res.Error, "a -> b -> a") {
		t.Errorf("run error %q does not print the cycle path", res.Error)
	}
	if len(res.Nodes) != 0 {
		t.Errorf("nodes reported for an invalid spec: %+v", res.Nodes)
	}
}

func TestWhenFalseSkipsSubtree(t *testing.T) {
	queue := newQueue(t)
	startWorker(t, queue)
	marker := filepath.Join(t.TempDir(), "ran")
	res := runSpec(t, queue, fmt.Sprintf(`
name: gated
nodes:
  - {id: check, type: command, with: {argv: ["sh", "-c", "exit 3"], ok_exit_codes: [0, 3]}}
  - {id: train, type: command, needs: [check], when: "${nodes.check.outputs.exit_code} == 0", with: {argv: ["touch", "%[1]s"]}}
  - {id: deploy, type: command, needs: [train], with: {argv: ["touch", "%[1]s"]}}
  - {id: alert, type: command, needs: [check], when: "${nodes.check.outputs.exit_code} != 0", with: {argv: ["echo", "check said ${nodes.check.outputs.exit_code}"]}}
`, marker), nil)
	wantStatus(t, res, runs.StatusSucceeded)
	for _, id := range []string{"train", "deploy"} {
		if n := node(t, res, id); n.Status != runs.NodeSkipped {
			t.Errorf("%s: %s, want skipped", id, n.Status)
		}
	}
	if got := node(t, res, "alert").Outputs["stdout"]; got != "check said 3" {
		t.Errorf("alert stdout = %q", got)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("a skipped node ran")
	}
}

// TestWorkerKilledMidNode kills the worker process while a long node runs
// and checks a new worker finishes the run without redoing finished nodes.
func TestWorkerKilledMidNode(t *testing.T) {
	parallel(t)
	queue := newQueue(t)
	dir := t.TempDir()
	count := func(name string) int {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return strings.Count(string(b), "\n")
	}
	spec := fmt.Sprintf(`
name: crash
nodes:
  - {id: first, type: command, with: {argv: ["sh", "-c", "echo x >> %[1]s/first"]}}
  - id: long
    type: command
    needs: [first]
    heartbeat: 8s
    retry: {initial_interval: 100ms}
    with: {argv: ["sh", "-c", "echo x >> %[1]s/long; sleep 4; echo done"]}
  - {id: last, type: command, needs: [long], with: {argv: ["sh", "-c", "echo x >> %[1]s/last"]}}
`, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	first := startChildWorker(t, queue)
	run, err := runs.Start(ctx, tclient, runs.Request{Spec: []byte(spec), TaskQueue: queue})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() bool { return count("long") == 1 })
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()

	startChildWorker(t, queue)
	res, err := runs.Wait(ctx, tclient, run.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, runs.StatusSucceeded)
	if got := count("first"); got != 1 {
		t.Errorf("finished node ran %d times, want 1", got)
	}
	// The killed attempt and its retry; a machine running every package at
	// once can also make the live retry miss a heartbeat, and a further
	// attempt then finishes the node, still counted in its attempts.
	long := count("long")
	if long < 2 {
		t.Errorf("killed node ran %d times, want at least 2 (killed attempt + retry)", long)
	}
	if got := count("last"); got != 1 {
		t.Errorf("last ran %d times", got)
	}
	if n := node(t, res, "long"); int(n.Attempts) != long || n.Outputs["stdout"] != "done" {
		t.Errorf("long: attempts %d (ran %d times), stdout %q", n.Attempts, long, n.Outputs["stdout"])
	}
}

// startChildWorker starts this test binary as a worker process on queue,
// with env (KEY=VALUE: its store, its lake) added to the test process's
// environment.
func startChildWorker(t *testing.T, queue string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		childWorkerEnv+"="+queue,
		"RETRAIN_TEMPORAL_ADDRESS="+server.FrontendAddress(),
		"RETRAIN_NAMESPACE="+server.Namespace())
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	return cmd
}

func waitFor(t *testing.T, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCancelKillsProcessGroup cancels a run and checks the command's
// children are gone and the run reports cancelled.
func TestCancelKillsProcessGroup(t *testing.T) {
	parallel(t)
	queue := newQueue(t)
	startWorker(t, queue)
	pidFile := filepath.Join(t.TempDir(), "pid")
	ctx := context.Background()
	run, err := runs.Start(ctx, tclient, runs.Request{TaskQueue: queue, Spec: []byte(fmt.Sprintf(`
name: cancel
nodes:
  - id: sleepy
    type: command
    heartbeat: 1s
    with: {argv: ["sh", "-c", "sleep 300 & echo $! > %s; wait"]}
`, pidFile))})
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	waitFor(t, 30*time.Second, func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil || !bytes.HasSuffix(b, []byte("\n")) {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	if err := tclient.CancelWorkflow(ctx, run.ID, ""); err != nil {
		t.Fatal(err)
	}
	res, err := runs.Wait(ctx, tclient, run.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, runs.StatusCancelled)
	waitFor(t, 10*time.Second, func() bool { return syscall.Kill(pid, 0) != nil })
}

// TestCLIRunWaitJSON drives `retrain run FILE --wait --json` in process.
func TestCLIRunWaitJSON(t *testing.T) {
	parallel(t)
	queue := newQueue(t)
	startWorker(t, queue)
	file := filepath.Join(t.TempDir(), "two.yaml")
	if err := os.WriteFile(file, []byte(`
name: two
params:
  date: {type: string, default: "2026-01-01"}
nodes:
  - {id: a, type: command, with: {argv: ["echo", "hello"]}}
  - {id: b, type: command, needs: [a], with: {argv: ["echo", "${params.date}", "${nodes.a.outputs.stdout}"]}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	app := &cli.App{Out: &out, Err: &errOut}
	root := cli.NewRoot(app, "retrain")
	root.SetArgs([]string{"run", file, "--wait", "--json", "--param", "date=2026-11-20",
		"--address", server.FrontendAddress(), "--namespace", server.Namespace(), "--task-queue", queue})
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("run: %v\n%s", err, errOut.String())
	}
	var res struct {
		Status string `json:"status"`
		Nodes  []struct {
			ID        string         `json:"id"`
			Status    string         `json:"status"`
			Attempts  int            `json:"attempts"`
			StartedAt *time.Time     `json:"started_at"`
			EndedAt   *time.Time     `json:"ended_at"`
			Outputs   map[string]any `json:"outputs"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	if res.Status != "succeeded" || len(res.Nodes) != 2 {
		t.Fatalf("result %+v", res)
	}
	b := res.Nodes[1]
	if b.ID != "b" || b.Status != "succeeded" || b.Attempts != 1 || b.StartedAt == nil || b.EndedAt == nil {
		t.Errorf("node b = %+v", b)
	}
	if b.Outputs["stdout"] != "2026-11-20 hello" {
		t.Errorf("b stdout = %q", b.Outputs["stdout"])
	}
	if !strings.Contains(errOut.String(), "b ") || !strings.Contains(errOut.String(), "succeeded") {
		t.Errorf("no live progress on stderr:\n%s", errOut.String())
	}

	// `retrain status RUN_ID --json` reports the same run.
	var id struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(out.Bytes(), &id); err != nil || id.ID == "" {
		t.Fatalf("result has no run id: %v", err)
	}
	out.Reset()
	root = cli.NewRoot(app, "retrain")
	root.SetArgs([]string{"status", id.ID, "--json", "--address", server.FrontendAddress(), "--namespace", server.Namespace()})
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("status: %v", err)
	}
	var st runs.Result
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		t.Fatalf("status output is not JSON: %v\n%s", err, out.String())
	}
	if st.ID != id.ID || st.Status != runs.StatusSucceeded || len(st.Nodes) != 2 {
		t.Errorf("status = %+v", st)
	}
}

// TestDialRejectsUnknownNamespace: a typo in --namespace fails at connect
// time, naming the namespace, instead of at the first call.
func TestDialRejectsUnknownNamespace(t *testing.T) {
	conn := temporalconn.Options{Address: server.FrontendAddress(), Namespace: "no-such-namespace"}
	c, err := conn.Dial(context.Background(), quiet)
	if err == nil {
		c.Close()
		t.Fatal("dial to an unknown namespace succeeded")
	}
	if !strings.Contains(err.Error(), `no namespace "no-such-namespace"`) {
		t.Errorf("error %q does not name the namespace", err)
	}
}
