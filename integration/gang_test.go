package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/retrain-ml/retrain/runs"
)

// Multi-host training (a train node with hosts: 2): two retrain-worker
// processes are two hosts, each in a network namespace of its own
// (hostnet_test.go), polling a queue of their own that the train node is
// sent to. The rest of each run (the lake steps, evaluate, deploy) runs
// on an in-process worker.

// gangEnv is a torchEnv with two hosts for the train node.
type gangEnv struct {
	*torchEnv
	net      *hostNet
	queue    string // the train node's queue, which the hosts poll
	bin      string // retrain-worker
	frontend string // Temporal, as the hosts reach it
	s3       string // the S3 server, as the hosts reach it
}

func newGangEnv(t *testing.T) *gangEnv {
	t.Helper()
	return newGangEnvOn(t, newTorchEnv(t, true))
}

// newGangEnvOn is newGangEnv on te: a test whose trainer needs no
// PyTorch gives one without its Python.
func newGangEnvOn(t *testing.T, te *torchEnv) *gangEnv {
	t.Helper()
	e := &gangEnv{torchEnv: te, net: newHostNet(t, 2)}
	e.queue = e.torchEnv.queue + "-hosts"
	e.bin = treeBinary(t, "./cmd/retrain-worker")
	e.frontend = e.net.forward(t, server.FrontendAddress())
	u, err := url.Parse(e.srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	e.s3 = e.net.forward(t, u.Host)
	return e
}

// start starts host i's worker (host id h<i>) and waits until it polls.
func (e *gangEnv) start(t *testing.T, i int) *workerProc {
	t.Helper()
	w := &workerProc{name: fmt.Sprintf("h%d", i)}
	w.cmd = e.net.command(i, e.bin,
		"--address", e.frontend, "--namespace", server.Namespace(),
		"--task-queue", e.queue, "--trusted-queues", e.torchEnv.queue,
		"--s3-uri", e.srv.URI(""), "--s3-endpoint", "http://"+e.s3, "--s3-region", e.srv.Region,
		"--pass-env", "PYTHONDONTWRITEBYTECODE,OMP_NUM_THREADS", "--host-id", w.name, "--log-level", "info")
	w.cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TMPDIR=" + t.TempDir(), "PYTHONDONTWRITEBYTECODE=1", "OMP_NUM_THREADS=" + os.Getenv("OMP_NUM_THREADS"),
		"AWS_ACCESS_KEY_ID=" + e.srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + e.srv.SecretKey, "AWS_EC2_METADATA_DISABLED=true",
	}
	w.start(t)
	suffix := fmt.Sprintf("%d@%s@retrain", w.cmd.Process.Pid, w.name)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("host %s did not poll %s within a minute; output:\n%s", w.name, e.queue, w.output())
		}
		resp, err := tclient.DescribeTaskQueue(context.Background(), e.queue, enumspb.TASK_QUEUE_TYPE_ACTIVITY)
		if err == nil && strings.Contains(fmt.Sprint(resp.GetPollers()), suffix) {
			return w
		}
	}
}

// rankPIDs are the trainer processes of host w: the processes below its
// worker that run train.py. (Not every process whose environment says
// RETRAIN_HOST_ID=h1: another test's gang has hosts of that name too.)
func rankPIDs(w *workerProc) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmd, []byte("train.py")) && descends(pid, w.pid()) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// descends reports whether process pid is below ancestor.
func descends(pid, ancestor int) bool {
	for depth := 0; pid > 1 && depth < 64; depth++ {
		stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err != nil {
			return false
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 2 {
			return false
		}
		if pid, err = strconv.Atoi(fields[1]); err != nil {
			return false
		}
		if pid == ancestor {
			return true
		}
	}
	return false
}

// gangTrainSpec trains on a split the earlier run made, with the node
// sent to the hosts' queue, then deploys; with is added to the train
// node's with block and retry is its policy.
func (e *gangEnv) gangTrainSpec(model, retry string, epochs int, extra ...string) []byte {
	return []byte(fmt.Sprintf(`name: gang-train
params:
  data: {type: string}
  hosts: {type: int, default: 2}
nodes:
  - id: train
    type: train
    queue: %s
    heartbeat: 10s
    retry: %s
    with:
      trainer: command
      data: ${params.data}
      data_format: npy
      hosts: ${params.hosts}
      processes: 1
      argv: [%q, %q, "--epochs", "%d", "--seed", "1", "--batch-size", "1024", "--checkpoint-every", "20"]
%s
  - id: deploy
    type: deploy
    needs: [train]
    with:
      model: %s
      dir: ${nodes.train.outputs.model_uri}
`, e.queue, retry, e.py, filepath.Join(e.scripts, "train.py"), epochs, strings.Join(extra, "\n"), model))
}

func (e *gangEnv) runSpec(t *testing.T, spec []byte, params map[string]any) *runs.Result {
	t.Helper()
	return runRequest(t, runs.Request{Spec: spec, SpecFile: "gang.yaml", Params: params, TaskQueue: e.torchEnv.queue}, 5*time.Minute)
}

// TestTrainAcrossHosts runs torch-retrain's train node on two hosts and
// checks what a gang promises: the same model as on one host,
// a rank's failure and a hang stopping every rank and named, a killed
// host's worker replaced by a new gang that resumes from the checkpoint.
func TestTrainAcrossHosts(t *testing.T) {
	parallelTorch(t, 160*time.Second)
	if testing.Short() {
		t.Skip("builds retrain-worker and runs torch ranks in two worker processes")
	}
	e := newGangEnv(t)
	hosts := []*workerProc{e.start(t, 0), e.start(t, 1)}
	spec := exampleSpec(t, "torch-retrain", "    heartbeat: 1m\n", "    heartbeat: 10s\n    queue: "+e.queue+"\n")
	run := func(model string, n int) (*runs.Result, float64, time.Duration) {
		res := runRequest(t, runs.Request{Spec: spec, SpecFile: "torch-retrain.yaml", TaskQueue: e.torchEnv.queue,
			Params: e.params(map[string]any{"hosts": n, "processes": 1, "model": model})}, 5*time.Minute)
		wantStatus(t, res, runs.StatusSucceeded)
		tr := node(t, res, "train")
		return res, node(t, res, "evaluate").Outputs["auc"].(float64), tr.EndedAt.Sub(*tr.StartedAt)
	}

	// 1. One host, then two, on the same data and seed.
	one, auc1, took1 := run("ctr_one", 1)
	two, auc2, took2 := run("ctr_two", 2)
	tr := node(t, two, "train")
	t.Logf("hosts 1: AUC %.5f, train node %v; hosts 2: AUC %.5f, train node %v (%.2fx; both hosts share this machine's cores, so this is the overhead, not a speedup)",
		auc1, took1.Round(10*time.Millisecond), auc2, took2.Round(10*time.Millisecond), took2.Seconds()/took1.Seconds())
	t.Logf("hosts 2 outputs: hosts %v, restarts %v, summary %q", tr.Outputs["hosts"], tr.Outputs["restarts"], tr.Outputs["summary"])
	if math.Abs(auc1-auc2) > 0.005 {
		t.Errorf("AUC on 2 hosts %.5f, on 1 host %.5f: want within 0.005", auc2, auc1)
	}
	gotHosts, _ := tr.Outputs["hosts"].([]any)
	if len(gotHosts) != 2 {
		t.Fatalf("train outputs hosts %v: want 2", tr.Outputs["hosts"])
	}
	for i, h := range gotHosts {
		m := h.(map[string]any)
		if m["address"] != e.net.addrs[i] && !(m["host"] == "h1" && m["address"] == e.net.addrs[0]) && !(m["host"] == "h0" && m["address"] == e.net.addrs[1]) {
			t.Errorf("host %d: %v: want an address of %v", i, m, e.net.addrs)
		}
		if want := fmt.Sprintf("h%d", i); m["host"] != "h0" && m["host"] != "h1" {
			t.Errorf("host %d is %v, want %s or the other", i, m["host"], want)
		}
	}
	if v := e.modelVersions(t, "ctr_two"); len(v) != 1 {
		t.Errorf("ctr_two versions %v: want exactly one", v)
	}
	data := node(t, one, "split").Outputs["uri"].(string)

	// 2. A rank that exits 7 on host 1 stops every rank, named.
	res := e.runSpec(t, e.gangTrainSpec("ctr_exit", "{max_attempts: 1}", 3, `      env: {TRAIN_PY_EXIT_AT: "1:5"}`), map[string]any{"data": data})
	wantStatus(t, res, runs.StatusFailed)
	t.Logf("rank exits 7: %s", res.Error)
	for _, want := range []string{"rank 1 of 2", "exited with code 7", "TRAIN_PY_EXIT_AT"} {
		if !strings.Contains(res.Error, want) {
			t.Errorf("error %q: want it to say %q", res.Error, want)
		}
	}
	if !strings.Contains(res.Error, "host h0") && !strings.Contains(res.Error, "host h1") {
		t.Errorf("error %q names no host", res.Error)
	}
	for _, h := range hosts {
		if pids := rankPIDs(h); len(pids) > 0 {
			t.Errorf("host %s still runs ranks %v after the gang failed", h.name, pids)
		}
	}

	// 3. A rank that stops advancing after step 5, hang_timeout 20s.
	res = e.runSpec(t, e.gangTrainSpec("ctr_hang", "{max_attempts: 1}", 3, `      env: {TRAIN_PY_HANG_AT: "1:5"}`, `      hang_timeout: 20s`), map[string]any{"data": data})
	wantStatus(t, res, runs.StatusFailed)
	t.Logf("rank hangs: %s", res.Error)
	// Rank 1 sleeps after step 5; rank 0 waits for it in step 6's
	// all-reduce, at step 5 too. Asked for their stacks (train.py prints
	// them on SIGUSR1), rank 1's host names it, not in a collective; rank
	// 0's holds its verdict, its rank waiting in one.
	for _, want := range []string{"rank 1 on host h1 has not advanced past step 5", "hang_timeout 20s", "is not in a collective: its stack is at File", "train.py", "RankHung"} {
		if !strings.Contains(res.Error, want) {
			t.Errorf("error %q: want it to say %q", res.Error, want)
		}
	}
	if hung := node(t, res, "train"); hung.StartedAt != nil && hung.EndedAt != nil {
		t.Logf("the hung gang's node ran %v", hung.EndedAt.Sub(*hung.StartedAt).Round(100*time.Millisecond))
	}
	for _, h := range hosts {
		if pids := rankPIDs(h); len(pids) > 0 {
			t.Errorf("host %s still runs ranks %v after the hang", h.name, pids)
		}
	}

	// 4. SIGKILL host 1's worker mid-training.
	e.killMidTraining(t, hosts, data)

	// 5. Cancel the run mid-training.
	e.cancelMidTraining(t, hosts, data)

	// 5. Figures for docs/scaling.md: a longer training on 1 and 2 hosts.
	if os.Getenv("RETRAIN_GANG_FIGURES") != "" {
		e.figures(t, hosts, data)
	}
}

// figures trains 10 epochs of the demo split on one host and on two,
// alternating, and logs the train node's time, each host's pace and rank
// 0's communication line (bytes all-reduced a step, the share of the loop
// spent waiting in the all-reduce).
func (e *gangEnv) figures(t *testing.T, hosts []*workerProc, data string) {
	t.Helper()
	for round := 1; round <= 2; round++ {
		for _, n := range []int{1, 2} {
			seen := []int{len(hosts[0].output()), len(hosts[1].output())}
			res := e.runSpec(t, e.gangTrainSpec(fmt.Sprintf("ctr_fig_%d_%d", round, n), "{max_attempts: 1}", 10), map[string]any{"data": data, "hosts": n})
			wantStatus(t, res, runs.StatusSucceeded)
			tr := node(t, res, "train")
			t.Logf("figures round %d, hosts %d: train node %v; %s; %s", round, n, tr.EndedAt.Sub(*tr.StartedAt).Round(10*time.Millisecond),
				tr.Outputs["summary"], lastCommunication(hosts, seen))
		}
	}
}

// lastCommunication is the last "communication:" line rank 0 printed on
// any host since the hosts' outputs were seen long.
func lastCommunication(hosts []*workerProc, seen []int) string {
	line := ""
	for i, h := range hosts {
		for _, l := range strings.Split(h.output()[seen[i]:], "\n") {
			if i := strings.Index(l, "communication: "); i >= 0 {
				line = l[i:]
			}
		}
	}
	return strings.TrimSuffix(line, "\"")
}

// cancelMidTraining cancels a run whose ranks run on both hosts: every
// rank is gone soon after, and the run ends cancelled.
func (e *gangEnv) cancelMidTraining(t *testing.T, hosts []*workerProc, data string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run, err := runs.Start(ctx, tclient, runs.Request{Spec: e.gangTrainSpec("ctr_cancel", "{max_attempts: 1}", 30), SpecFile: "gang.yaml",
		Params: map[string]any{"data": data}, TaskQueue: e.torchEnv.queue})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Minute); len(rankPIDs(hosts[0])) == 0 || len(rankPIDs(hosts[1])) == 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the ranks did not start on both hosts within 2 minutes")
		}
	}
	cancelled := time.Now()
	if err := tclient.CancelWorkflow(ctx, run.ID, ""); err != nil {
		t.Fatal(err)
	}
	for len(rankPIDs(hosts[0]))+len(rankPIDs(hosts[1])) > 0 {
		if time.Since(cancelled) > 30*time.Second {
			t.Fatalf("ranks %v and %v still run 30 s after the run was cancelled", rankPIDs(hosts[0]), rankPIDs(hosts[1]))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("cancelled the run: every rank on both hosts gone %v after", time.Since(cancelled).Round(10*time.Millisecond))
	res, err := runs.Wait(ctx, tclient, run.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, runs.StatusCancelled)
	if v := e.modelVersions(t, "ctr_cancel"); len(v) != 0 {
		t.Errorf("ctr_cancel versions %v after a cancelled run", v)
	}
}

// killMidTraining SIGKILLs host 1's worker once training has stored a
// checkpoint, checks host 0's ranks are gone within 30 s, starts a new
// worker for host 1, and checks the run resumes and succeeds once.
func (e *gangEnv) killMidTraining(t *testing.T, hosts []*workerProc, data string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	// The kill lands soon after the checkpoint of step 100, mid-training:
	// of 20 epochs (440 steps; on a quiet machine the ranks run 100 steps
	// a second), or of 30 (660 steps) in the long form.
	epochs := 20
	if longTests(t) {
		epochs = 30
	}
	spec := e.gangTrainSpec("ctr_kill", "{max_attempts: 3, initial_interval: 1s}", epochs)
	run, err := runs.Start(ctx, tclient, runs.Request{Spec: spec, SpecFile: "gang.yaml", Params: map[string]any{"data": data}, TaskQueue: e.torchEnv.queue})
	if err != nil {
		t.Fatal(err)
	}
	// Wait for a stored checkpoint (the resume record) at step 100 or more.
	var ckptStep int64
	for deadline := time.Now().Add(3 * time.Minute); ckptStep < 100; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint at step 100 within 3 minutes; host outputs:\n%s\n%s", hosts[0].output(), hosts[1].output())
		}
		for o, err := range e.store.List(ctx, "checkpoints/gang-train/"+run.ID+"/train/") {
			if err != nil || !strings.HasSuffix(o.Key, "command/resume.json") {
				continue
			}
			var p struct {
				Step int64 `json:"checkpoint_step"`
			}
			if b, _, err := e.store.GetBytes(ctx, o.Key); err == nil && json.Unmarshal(b, &p) == nil {
				ckptStep = p.Step
			}
		}
	}
	before := rankPIDs(hosts[0])
	killed := time.Now()
	hosts[1].kill(t)
	t.Logf("SIGKILLed host h1's worker at checkpoint step %d; host h0 ranks then: %v", ckptStep, before)
	var gone time.Duration
	for {
		if len(rankPIDs(hosts[0])) == 0 {
			gone = time.Since(killed)
			break
		}
		if time.Since(killed) > 30*time.Second {
			t.Fatalf("host h0's ranks %v still run 30 s after host h1's worker was killed", rankPIDs(hosts[0]))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("host h0's ranks gone %v after the kill", gone.Round(10*time.Millisecond))
	// The second worker comes back once the gang has failed (heartbeat
	// 10 s) and the next attempt is forming with one host: it waits.
	time.Sleep(time.Until(killed.Add(15 * time.Second)))
	hosts[1] = e.start(t, 1)
	t.Logf("a new worker for host h1 polls %v after the kill", time.Since(killed).Round(10*time.Millisecond))
	res, err := runs.Wait(ctx, tclient, run.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, runs.StatusSucceeded)
	tr := node(t, res, "train")
	t.Logf("after the kill: run ended %v after it; train %s; attempts %v", time.Since(killed).Round(10*time.Millisecond), tr.Outputs["summary"], tr.Outputs["attempts"])
	// The kill costs one restart. A machine running every package at once
	// (CI's long forms) can also miss a heartbeat of the new gang: a
	// further restart then resumes from that gang's own checkpoint, never
	// from before the one stored at the kill.
	restarts, _ := tr.Outputs["restarts"].(float64)
	if restarts < 1 {
		t.Errorf("restarts %v: want at least the kill's", tr.Outputs["restarts"])
	}
	if rf, _ := tr.Outputs["resumed_from"].(float64); int64(rf) < ckptStep {
		t.Errorf("resumed_from %v: want at least the checkpoint step %d stored before the kill", rf, ckptStep)
	}
	attempts, _ := tr.Outputs["attempts"].([]any)
	if len(attempts) != int(restarts)+1 || !strings.Contains(fmt.Sprint(attempts[0]), "host") {
		t.Fatalf("attempts %v: want the first one's error to name a host", attempts)
	}
	at := func(i int, k string) string {
		v, _ := attempts[i].(map[string]any)[k].(string)
		ts, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return "-"
		}
		return "+" + ts.Sub(killed).Round(100*time.Millisecond).String()
	}
	t.Logf("timeline from the kill: attempt 1 failed %s; attempt 2 looked for hosts from %s, formed %s (after the worker came back), ended %s",
		at(0, "ended_at"), at(1, "started_at"), at(1, "formed_at"), at(1, "ended_at"))
	if v := e.modelVersions(t, "ctr_kill"); len(v) != 1 {
		t.Errorf("ctr_kill versions %v: want exactly one", v)
	}
}
