package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/activities/split/splittest"
	"github.com/retrain-ml/retrain/activities/train"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/storage"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/worker"
)

// Gangs bounded by their node and their hosts' operators: in-process
// workers with distinct host ids on loopback are the hosts (a gang whose
// hosts are all on loopback is allowed), the run's own worker resolves
// it and runs its workflows.

// gangHosts starts run, a worker for the run on queue, and one worker
// of host per id polling queue+"-hosts", the train node's queue; it
// returns that queue once every host polls it.
func gangHosts(t *testing.T, queue string, run, host worker.Config, ids ...string) string {
	t.Helper()
	hq := queue + "-hosts"
	run.TaskQueue, run.Host.ID = queue, "run-"+queue
	startWorkerWith(t, run)
	for _, id := range ids {
		h := host
		h.TaskQueue, h.TrustedQueues = hq, []string{queue}
		h.Host.ID, h.Host.AdvertiseAddress = id, "127.0.0.1"
		startWorkerWith(t, h)
	}
	// The gang lists the queue's pollers: wait until every host polls.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := tclient.DescribeTaskQueue(context.Background(), hq, enumspb.TASK_QUEUE_TYPE_ACTIVITY)
		n := 0
		if err == nil {
			for _, id := range ids {
				if strings.Contains(fmt.Sprint(resp.GetPollers()), "@"+id+"@retrain") {
					n++
				}
			}
		}
		if n == len(ids) {
			return hq
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of hosts %v poll %s", n, ids, hq)
		}
	}
}

// gangActivities are the gang workflow's activities of one run, from its
// history: each lease's input and host, and the hosts released.
type gangActivities struct {
	leases   []train.LeaseInput
	released []string
}

func gangHistory(t *testing.T, childID string) gangActivities {
	t.Helper()
	var g gangActivities
	it := tclient.GetWorkflowHistory(context.Background(), childID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		a := ev.GetActivityTaskScheduledEventAttributes()
		if a == nil {
			continue
		}
		host := a.GetTaskQueue().GetName()
		host = host[strings.LastIndex(host, "/")+1:]
		switch a.GetActivityType().GetName() {
		case train.GangLeaseActivity:
			var in train.LeaseInput
			if err := json.Unmarshal(a.GetInput().GetPayloads()[0].GetData(), &in); err != nil {
				t.Fatal(err)
			}
			g.leases = append(g.leases, in)
		case train.GangReleaseActivity:
			g.released = append(g.released, host)
		}
	}
	return g
}

// TestGangBoundedByNodeTimeout: the reported case, scaled down. A train
// node with timeout 6s, hosts: 3 and gang_timeout: 100h, and two live
// hosts: the attempt fails at the node's 6 s, not 100 h later, saying
// the node's timeout ended it; both joined hosts' leases are released,
// and no lease was asked to hold past what was left of the 6 s (before:
// 100h plus a 2m margin). No rank starts.
func TestGangBoundedByNodeTimeout(t *testing.T) {
	parallel(t)
	queue := newQueue(t)
	hq := gangHosts(t, queue, worker.Config{}, worker.Config{}, "h1", "h2")
	marker := filepath.Join(t.TempDir(), "rank-started")
	spec := fmt.Sprintf(`name: gang-bound
nodes:
  - id: train
    type: train
    queue: %s
    timeout: 6s
    retry: {max_attempts: 1}
    with:
      trainer: command
      data: s3://nowhere/split
      hosts: 3
      gang_timeout: 100h
      argv: ["sh", "-c", "touch %s"]
`, hq, marker)
	start := time.Now()
	res := runRequest(t, runs.Request{Spec: []byte(spec), SpecFile: "gang-bound.yaml", TaskQueue: queue}, time.Minute)
	took := time.Since(start)
	wantStatus(t, res, runs.StatusFailed)
	t.Logf("failed after %v: %s", took.Round(100*time.Millisecond), res.Error)
	for _, want := range []string{"2 of 3 hosts joined the gang within the node's timeout 6s", "caps gang_timeout 100h", "(joined: h1, h2)", "leases were released and no rank started"} {
		if !strings.Contains(res.Error, want) {
			t.Errorf("error %q: want it to say %q", res.Error, want)
		}
	}
	if took > 30*time.Second {
		t.Errorf("the run failed after %v: want the node's 6 s and little more", took)
	}
	g := gangHistory(t, res.ID+"/train")
	if len(g.leases) < 2 {
		t.Fatalf("leases %+v: want h1 and h2 asked", g.leases)
	}
	for _, l := range g.leases {
		t.Logf("lease asked: hold %v, hosts %d, processes %d", l.Hold, l.Hosts, l.Processes)
		if l.Hold <= 0 || l.Hold > 6*time.Second {
			t.Errorf("a lease asked to hold %v: want at most what was left of the node's 6 s", l.Hold)
		}
	}
	t.Logf("leases released on: %s", strings.Join(g.released, ", "))
	if !strings.Contains(strings.Join(g.released, ","), "h1") || !strings.Contains(strings.Join(g.released, ","), "h2") {
		t.Errorf("released %v: want both joined hosts' leases released", g.released)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("a rank started (%s exists)", marker)
	}
}

// TestGangLimitsRefused: processes and hosts past the workers' limits.
// torch-retrain exposes processes as a param: -p processes=30 against a
// worker with --max-processes-per-host 4 is refused when the run starts,
// naming the field, the value and the limit, and so is hosts=3 against
// --max-hosts 2. A host whose own limit is lower than the resolving
// worker's refuses the gang before it leases, and the attempt fails at
// once, not at gang_timeout.
func TestGangLimitsRefused(t *testing.T) {
	parallel(t)
	queue := newQueue(t)
	startWorkerWith(t, worker.Config{TaskQueue: queue, Host: worker.HostConfig{ID: "run-" + queue, MaxProcesses: 4, MaxHosts: 2}})
	base := map[string]any{"start_date": retrainStart, "end_date": retrainEnd, "python": "python3", "scripts": "/nowhere"}
	for _, c := range []struct {
		param string
		value any
		want  string
	}{
		{"processes", 30, "processes 30 is above this worker's limit of 4 ranks per host (--max-processes-per-host)"},
		{"hosts", 3, "hosts 3 is above this worker's limit of 2 hosts per gang (--max-hosts)"},
	} {
		params := map[string]any{c.param: c.value}
		for k, v := range base {
			params[k] = v
		}
		start := time.Now()
		res := runRequest(t, runs.Request{Pipeline: "torch-retrain", Params: params, TaskQueue: queue}, time.Minute)
		wantStatus(t, res, runs.StatusFailed)
		t.Logf("-p %s=%v refused after %v: %s", c.param, c.value, time.Since(start).Round(10*time.Millisecond), res.Error)
		if !strings.Contains(res.Error, c.want) || !strings.Contains(res.Error, "node train (type train)") {
			t.Errorf("-p %s=%v: error %q, want it to name the node and say %q", c.param, c.value, res.Error, c.want)
		}
		for _, n := range res.Nodes {
			if n.Status != "" && n.Status != runs.NodePending {
				t.Errorf("node %s is %s: want nothing started", n.ID, n.Status)
			}
		}
	}

	// The hosts' own limit: 1 rank each, below the run's worker's 16.
	q3 := newQueue(t)
	lowHosts := gangHosts(t, q3, worker.Config{Host: worker.HostConfig{MaxProcesses: 16}}, worker.Config{Host: worker.HostConfig{MaxProcesses: 1}}, "l1", "l2")
	spec := fmt.Sprintf(`name: gang-limit
nodes:
  - id: train
    type: train
    queue: %s
    retry: {max_attempts: 3}
    with:
      trainer: command
      data: s3://nowhere/split
      hosts: 2
      processes: 2
      gang_timeout: 10m
      argv: ["sh", "-c", "exit 0"]
`, lowHosts)
	start := time.Now()
	res := runRequest(t, runs.Request{Spec: []byte(spec), SpecFile: "gang-limit.yaml", TaskQueue: q3}, time.Minute)
	took := time.Since(start)
	wantStatus(t, res, runs.StatusFailed)
	t.Logf("a host's own limit refused the gang after %v: %s", took.Round(10*time.Millisecond), res.Error)
	if !strings.Contains(res.Error, "refuses the gang: processes 2 is above this worker's limit of 1 ranks per host (--max-processes-per-host)") {
		t.Errorf("error %q: want the host's refusal naming processes, 2 and its limit 1", res.Error)
	}
	if took > 30*time.Second {
		t.Errorf("refused after %v: want at once, not at gang_timeout", took)
	}
	g := gangHistory(t, res.ID+"/train")
	if len(g.leases) == 0 {
		t.Fatal("no lease asked")
	}
}

// TestGangRankSecrets: a train node on two hosts whose env holds the
// spec's own ${secret.GANG_TOKEN} (from each worker's --secrets-dir).
// Every rank gets the secret's value, as a single-host command does
// (before: the literal text "${secret.GANG_TOKEN}"); the rank that fails
// prints it to stderr, and the run's error, its history and the gang's
// show it masked.
func TestGangRankSecrets(t *testing.T) {
	parallel(t)
	const secret = "gang-s3cret-7f2d41"
	srv := s3test.Start(t)
	data := splittest.Write(t, srv.Open(t, ""), "gang-secret", 200, 50)
	secrets := t.TempDir()
	if err := os.WriteFile(filepath.Join(secrets, "GANG_TOKEN"), []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := worker.Config{Store: storage.Config{S3: srv.Config("")}, Env: progenv.Policy{SecretsDir: secrets}}
	queue := newQueue(t)
	hq := gangHosts(t, queue, cfg, cfg, "g1", "g2")
	seen := t.TempDir()
	script := fmt.Sprintf(`printf %%s "$HF_TOKEN" > %s/rank-$RANK; if [ "$RANK" = 1 ]; then echo "rank 1 token $HF_TOKEN" >&2; exit 3; fi; sleep 30`, seen)
	spec := fmt.Sprintf(`name: gang-secret
nodes:
  - id: train
    type: train
    queue: %s
    heartbeat: 10s
    retry: {max_attempts: 1}
    with:
      trainer: command
      data: %s
      hosts: 2
      processes: 1
      gang_timeout: 30s
      env: {HF_TOKEN: "${secret.GANG_TOKEN}"}
      argv: ["sh", "-c", %q]
`, hq, data, script)
	start := time.Now()
	res := runRequest(t, runs.Request{Spec: []byte(spec), SpecFile: "gang-secret.yaml", TaskQueue: queue}, time.Minute)
	wantStatus(t, res, runs.StatusFailed)
	t.Logf("failed after %v: %s", time.Since(start).Round(100*time.Millisecond), res.Error)
	for rank := range 2 {
		b, err := os.ReadFile(filepath.Join(seen, fmt.Sprintf("rank-%d", rank)))
		if err != nil {
			t.Fatalf("rank %d did not run: %v", rank, err)
		}
		t.Logf("rank %d's HF_TOKEN: %d bytes, the secret: %v", rank, len(b), string(b) == secret)
		if string(b) != secret {
			t.Errorf("rank %d got HF_TOKEN %q: want the secret's value", rank, b)
		}
	}
	if !strings.Contains(res.Error, "exited with code 3") || !strings.Contains(res.Error, "rank 1 token "+gangMask) {
		t.Errorf("error %q: want rank 1's failure with its stderr, the token masked", res.Error)
	}
	for where, b := range map[string][]byte{
		"the run's error":    []byte(res.Error),
		"the run's history":  historyJSON(t, res.ID),
		"the gang's history": historyJSON(t, res.ID+"/train"),
	} {
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s holds the secret", where)
		}
	}
}

// gangMask is what a masked secret reads as.
const gangMask = "***"
