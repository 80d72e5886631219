package integration

// The security suite: each way a client that may only start
// executions tried to get past a production worker's policy, against a
// real retrain-worker process configured as a careful operator would
// (docs/security.md). Every case asserts the refusal and that nothing
// ran: a marker file not created, the loopback listener not called, no
// secret in any form in the worker's log, the run's history, its result
// or its report.
//
// RETRAIN_IT_SECURITY_WORKER=/path/to/retrain-worker runs the suite
// against another build (default: this tree's), e.g. one from before the
// guard, to reproduce the weaknesses:
//
//	git worktree add /tmp/old 3e1ed3c && (cd /tmp/old && go build -o /tmp/old-worker ./cmd/retrain-worker)
//	RETRAIN_IT_SECURITY_WORKER=/tmp/old-worker go test ./integration/ -run TestSecurity -count=1

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/activities/gate"
	"github.com/retrain-ml/retrain/activities/lake"
	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/devkit/devstack"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/nodetype"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/temporalconn"
	"github.com/retrain-ml/retrain/worker"
	"github.com/retrain-ml/retrain/workflows"
)

// securityWorkerEnv names the retrain-worker binary the suite attacks.
const securityWorkerEnv = "RETRAIN_IT_SECURITY_WORKER"

// TestSecurity runs every case against one production-style worker.
func TestSecurity(t *testing.T) {
	parallelFor(t, 30*time.Second)
	e := startSecurityEnv(t)
	t.Run("InternalWorkflowsRefuseDirectStart", e.internalWorkflows)
	t.Run("StandaloneActivity", e.standaloneActivity)
	t.Run("NodeFromRunOnAnotherQueue", e.otherQueue)
	t.Run("SecretInParamStaysText", e.secretInParam)
	t.Run("SecretInWebhookHost", e.secretInHost)
	t.Run("MaskingEveryForm", e.masking)
	t.Run("AmplifiedParam", e.amplification) // last: on an old worker it leaves a run retrying
}

// secEnv is the production worker under attack and what it may touch.
type secEnv struct {
	bin       string
	queue     string
	allowed   string // --allow-paths
	markers   string // where a step that ran would leave its marker
	pipelines string // --pipelines
	secrets   string // --secrets-dir
	modelDir  string // a candidate's files, under allowed
	srv       *s3test.Server
	hook      *listener
	port      string // the listener's port
	planted   []planted
	proc      *exec.Cmd
	logPath   string
}

// planted is a secret the worker holds. Every escaped form of it (%q,
// JSON, URL) keeps its random cores intact, so a grep for the cores
// finds any of them.
type planted struct {
	name  string // ${secret.NAME}, or the variable for the AWS key
	value string
	cores []string
}

func (e *secEnv) secret(name string) planted {
	for _, p := range e.planted {
		if p.name == name {
			return p
		}
	}
	panic("no secret " + name)
}

// listener is a loopback HTTP server recording every request.
type listener struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []string // "METHOD URI\nBODY"
}

func newListener(t *testing.T) *listener {
	l := &listener{}
	l.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		l.mu.Lock()
		l.reqs = append(l.reqs, r.Method+" "+r.RequestURI+"\n"+string(b))
		l.mu.Unlock()
	}))
	t.Cleanup(l.srv.Close)
	return l
}

// got returns the requests whose path starts with prefix.
func (l *listener) got(prefix string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.reqs {
		if uri := strings.SplitN(r, " ", 2)[1]; strings.HasPrefix(uri, prefix) {
			out = append(out, r)
		}
	}
	return out
}

func startSecurityEnv(t *testing.T) *secEnv {
	t.Helper()
	bin := os.Getenv(securityWorkerEnv)
	if bin == "" {
		bin = treeBinary(t, "./cmd/retrain-worker")
	}
	t.Logf("worker under test: %s", bin)
	root := t.TempDir()
	e := &secEnv{
		bin: bin, queue: fmt.Sprintf("prodq-%d-%d", os.Getpid(), queues.Add(1)),
		allowed: filepath.Join(root, "allowed"), pipelines: filepath.Join(root, "pipelines"),
		secrets: filepath.Join(root, "secrets"), logPath: filepath.Join(root, "worker.log"),
	}
	e.markers = filepath.Join(e.allowed, "markers")
	e.modelDir = filepath.Join(e.allowed, "model")
	for _, d := range []string{e.markers, e.modelDir, e.pipelines, e.secrets} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(e.modelDir, "model.bin"), "weights")
	e.hook = newListener(t)
	e.port = e.hook.srv.URL[strings.LastIndex(e.hook.srv.URL, ":")+1:]
	e.srv = s3test.Start(t)

	// DB_PASS has characters that %q, JSON and URL encoding change; MULTI
	// is a PEM-like multi-line secret; HOSTY is a host (the listener's).
	db, l1, l2, tok := randomValue(t, "db-"), randomValue(t, "ml1-"), randomValue(t, "ml2-"), randomValue(t, "tok-")
	e.planted = []planted{
		{"DB_PASS", db + `"q\w/z`, []string{db}},
		{"MULTI", "-----BEGIN KEY-----\n" + l1 + "\n" + l2 + "\n-----END KEY-----", []string{l1, l2}},
		{"API_TOKEN", tok, []string{tok}},
		{"AWS_SECRET_ACCESS_KEY", e.srv.SecretKey, []string{e.srv.SecretKey}},
	}
	writeFile(t, filepath.Join(e.secrets, "DB_PASS"), e.secret("DB_PASS").value+"\n")
	writeFile(t, filepath.Join(e.secrets, "MULTI"), e.secret("MULTI").value+"\n")
	writeFile(t, filepath.Join(e.secrets, "HOSTY"), "127.0.0.1\n")
	e.writePipelines(t)

	e.proc = e.startWorker(t, server.FrontendAddress(), server.Namespace(), tclient, e.queue, e.logPath)
	return e
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// startWorker starts the binary under test on queue of the server at
// address, as an operator would: its own pipelines only, two programs,
// one folder, secrets from a folder and the environment, the store's
// credentials (the planted AWS key) in its environment and passed to no
// step. It returns once the process polls queue.
func (e *secEnv) startWorker(t *testing.T, address, namespace string, c client.Client, queue, logPath string, env ...string) *exec.Cmd {
	t.Helper()
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(e.bin, "--address", address, "--namespace", namespace,
		"--task-queue", queue, "--pipelines", e.pipelines,
		"--allow-commands", "echo,python3", "--allow-paths", e.allowed, "--secrets-dir", e.secrets,
		"--s3-uri", e.srv.URI(""), "--s3-endpoint", e.srv.Endpoint, "--s3-region", e.srv.Region,
		"--data-dir", filepath.Join(filepath.Dir(logPath), "data-"+queue), "--log-level", "debug")
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TMPDIR=" + t.TempDir(),
		"RETRAIN_SECRET_API_TOKEN=" + e.secret("API_TOKEN").value,
		"AWS_ACCESS_KEY_ID=" + e.srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + e.srv.SecretKey,
		"AWS_EC2_METADATA_DISABLED=true",
	}, env...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	prefix := fmt.Sprintf("%d@", cmd.Process.Pid)
	deadline := time.Now().Add(time.Minute)
	for ready := false; !ready; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("retrain-worker (pid %d) did not poll %s within a minute; output:\n%s", cmd.Process.Pid, queue, b)
		}
		n := 0
		for _, typ := range []enumspb.TaskQueueType{enumspb.TASK_QUEUE_TYPE_WORKFLOW, enumspb.TASK_QUEUE_TYPE_ACTIVITY} {
			resp, err := c.DescribeTaskQueue(context.Background(), queue, typ)
			if err != nil {
				continue
			}
			for _, p := range resp.GetPollers() {
				if strings.HasPrefix(p.GetIdentity(), prefix) {
					n++
					break
				}
			}
		}
		ready = n == 2
	}
	return cmd
}

// marker returns a path under the allowed folder that a step would
// create if it ran, and a python3 program creating it.
func (e *secEnv) marker(t *testing.T, name string) (string, string) {
	p := filepath.Join(e.markers, name)
	return p, fmt.Sprintf("open(%q, 'w').write('ran')", p)
}

func wantNoMarker(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		t.Errorf("marker %s exists: the step ran", filepath.Base(path))
	}
}

// errorType returns the error type of err's application error, or "".
func errorType(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Type()
	}
	return ""
}

func wantRefused(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: succeeded, want refused (error type %s)", what, errtype.Refused)
		return
	}
	if typ := errorType(err); typ != errtype.Refused {
		t.Errorf("%s: error type %q, want %s: %v", what, typ, errtype.Refused, err)
		return
	}
	t.Logf("%s: refused: %v", what, err)
}

// internalWorkflows: a client starts each workflow type the worker runs
// only as a child directly on its queue, with a hand-made input: each
// fails as Refused, and none of their nodes ran (case 1, weakness 1).
func (e *secEnv) internalWorkflows(t *testing.T) {
	markPath, markCode := e.marker(t, "foreach-python")
	retry := dags.RetryPolicy{MaxAttempts: 1, InitialInterval: time.Second, Backoff: 2, MaxInterval: time.Second}
	chunk := func(node dags.PlanNode) workflows.ChunkInput {
		return workflows.ChunkInput{Pipeline: "x", RunID: "x", Node: node, Items: []any{1}, Parallelism: 1}
	}
	cases := []struct {
		name, workflow string
		input          any
	}{
		{"ForeachChunk/python", workflows.ForeachChunkWorkflow, chunk(dags.PlanNode{
			ID: "a", Type: "command", Kind: dags.KindActivity, Target: "command", Retry: retry, Timeout: time.Minute,
			With: map[string]any{"argv": []any{"python3", "-c", markCode}},
		})},
		// The second attempt: no interpreter needed, a deploy
		// whose webhook carries two secrets to the listener.
		{"ForeachChunk/deploy-webhook", workflows.ForeachChunkWorkflow, chunk(dags.PlanNode{
			ID: "d", Type: "deploy", Kind: dags.KindActivity, Target: "deploy", Retry: retry, Timeout: time.Minute,
			With: map[string]any{"model": "fc", "dir": e.modelDir, "webhook_attempts": 1,
				"webhooks": []any{"http://127.0.0.1:" + e.port + "/fc?x=${secret.DB_PASS}&t=${secret.API_TOKEN}"}},
		})},
		{"Gate", gate.GateWorkflow, nodetype.Input{Pipeline: "x", RunID: "x", Node: "g", Type: gate.Name,
			With: map[string]any{"metrics": map[string]any{"auc": map[string]any{"min": 0.5}}, "candidate": map[string]any{"auc": 0.9}}}},
		{"PromoteFeatures", lake.PromoteWorkflow, nodetype.Input{Pipeline: "x", RunID: "x", Node: "p", Type: "promote_features",
			With:    map[string]any{"training_table": "ml.train", "staging_tables": []any{"ml.stage"}, "start_date": "2024-01-01", "end_date": "2024-01-02"},
			Options: &nodetype.Options{Timeout: 30 * time.Second, Retry: retry}}},
		{"Split", split.SplitWorkflow, nodetype.Input{Pipeline: "x", RunID: "x", Node: "s", Type: "split",
			With:    map[string]any{"table": "ml.train", "start_date": "2024-01-01", "end_date": "2024-01-02", "dense": []any{"x"}},
			Options: &nodetype.Options{Timeout: 30 * time.Second, Retry: retry}}},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, "/", "-"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			run, err := tclient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
				ID: fmt.Sprintf("sec-%s-%d", strings.ReplaceAll(c.name, "/", "-"), queues.Add(1)), TaskQueue: e.queue,
				// An old worker may run it until this bounds it.
				WorkflowExecutionTimeout: 30 * time.Second,
			}, c.workflow, c.input)
			if err != nil {
				t.Fatal(err)
			}
			wantRefused(t, c.workflow+" started directly", run.Get(ctx, nil))
		})
	}
	wantNoMarker(t, markPath)
	if got := e.hook.got("/fc"); len(got) > 0 {
		t.Errorf("the listener got %d requests from a directly started chunk's deploy: %q", len(got), got)
	}
}

// standaloneInput is the standalone start of a command node.
func standaloneInput(argv ...string) map[string]any {
	return map[string]any{"pipeline": "x", "run_id": "x", "node": "a", "type": "command", "with": map[string]any{"argv": argv}}
}

// standaloneActivity: SDK v1.50's client.ExecuteActivity starts a node's
// activity outside any workflow. The dev stack's server refuses it; a
// server that allows it hands it to the worker, which refuses it with
// nothing run, on the production queue and on a dev-style worker's
// (case 2, weakness 1).
func (e *secEnv) standaloneActivity(t *testing.T) {
	markPath, markCode := e.marker(t, "standalone")
	t.Run("ServerRefuses", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := tclient.ExecuteActivity(ctx, client.StartActivityOptions{
			ID: fmt.Sprintf("sec-standalone-%d", queues.Add(1)), TaskQueue: e.queue, StartToCloseTimeout: 30 * time.Second,
		}, "command", standaloneInput("python3", "-c", markCode))
		if err == nil {
			t.Fatalf("the dev stack's server accepted a standalone activity start; want it refused (%s: false)", devstack.StandaloneActivitiesKey)
		}
		t.Logf("server refused the start: %v", err)
	})
	t.Run("WorkerRefuses", func(t *testing.T) {
		// A server with standalone activities on, as a production
		// namespace may still have them.
		stack, err := devstack.Start(context.Background(), devstack.Options{
			DataDir: t.TempDir(), Headless: true, SearchAttributes: runs.SearchAttributes(), Logger: quiet,
			DynamicConfig: map[string]any{devstack.StandaloneActivitiesKey: true},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = stack.Stop() })
		conn := temporalconn.Options{Address: stack.FrontendAddress(), Namespace: stack.Namespace()}
		c, err := conn.Dial(context.Background(), quiet)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		prod := fmt.Sprintf("prodq-standalone-%d", queues.Add(1))
		e.startWorker(t, stack.FrontendAddress(), stack.Namespace(), c, prod, filepath.Join(t.TempDir(), "worker.log"))
		// And a dev-style worker (inline specs, any program), as `retrain
		// dev` runs one on its queue.
		dev := fmt.Sprintf("retrain-dev-%d", queues.Add(1))
		w, err := worker.New(context.Background(), c, stack.Namespace(), worker.Config{TaskQueue: dev, AllowInlineSpecs: true}, quiet)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		devMark := filepath.Join(e.markers, "standalone-dev")
		for _, s := range []struct {
			what, queue string
			input       map[string]any
		}{
			{"echo on " + prod, prod, standaloneInput("echo", "standalone-ran")},
			{"python3 on " + prod, prod, standaloneInput("python3", "-c", markCode)},
			{"sh on the dev worker's " + dev, dev, standaloneInput("sh", "-c", "id -un > "+devMark)},
		} {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			h, err := c.ExecuteActivity(ctx, client.StartActivityOptions{
				ID: fmt.Sprintf("sec-standalone-%d", queues.Add(1)), TaskQueue: s.queue, StartToCloseTimeout: 30 * time.Second,
				RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
			}, "command", s.input)
			if err != nil {
				cancel()
				t.Fatalf("%s: the server refused the start (%v); this case needs it accepted", s.what, err)
			}
			var res nodetype.Result
			err = h.Get(ctx, &res)
			cancel()
			wantRefused(t, "standalone "+s.what, err)
			if out, _ := res.Outputs["stdout"].(string); strings.Contains(out, "standalone-ran") {
				t.Errorf("standalone %s printed %q", s.what, out)
			}
		}
		wantNoMarker(t, devMark)
	})
	wantNoMarker(t, markPath)
}

// otherQueue: a permissive worker's run (inline specs, queue A) sends a
// node to the production queue; the production worker refuses it, since
// no run on its own queue scheduled it. A production worker that trusts
// A (--trusted-queues, here by its environment) runs it (case 3).
func (e *secEnv) otherQueue(t *testing.T) {
	markPath, markCode := e.marker(t, "other-queue")
	permissive := newQueue(t)
	startWorkerWith(t, worker.Config{TaskQueue: permissive})
	spec := func(queue string) string {
		return fmt.Sprintf(`name: hop
nodes:
  - id: hop
    type: command
    queue: %s
    retry: {max_attempts: 2, initial_interval: 1s}
    with: {argv: [python3, -c, %s]}
`, queue, strconv.Quote(markCode))
	}
	res := runSpec(t, permissive, spec(e.queue), nil)
	if res.Status != runs.StatusFailed {
		t.Errorf("run %s, want failed", res.Status)
	}
	n := node(t, res, "hop")
	if n.Status != runs.NodeFailed || n.Attempts != 1 || !strings.Contains(n.Error, "trusted-queues") {
		t.Errorf("node sent to %s: %s after %d attempts: %s; want failed at once, refused naming --trusted-queues", e.queue, n.Status, n.Attempts, n.Error)
	} else {
		t.Logf("refused: %s", n.Error)
	}
	wantNoMarker(t, markPath)

	// The control: the same node on a production worker whose operator
	// trusts the permissive queue.
	trusting := fmt.Sprintf("prodq-trusting-%d", queues.Add(1))
	e.startWorker(t, server.FrontendAddress(), server.Namespace(), tclient, trusting, filepath.Join(t.TempDir(), "worker.log"),
		worker.EnvTrustedQueues+"="+trusting+","+permissive)
	wantStatus(t, runSpec(t, permissive, spec(trusting), nil), runs.StatusSucceeded)
	if _, err := os.Stat(markPath); err != nil {
		t.Errorf("the trusting worker did not run the node: %v", err)
	}
	os.Remove(markPath)
}
