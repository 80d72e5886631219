package integration

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdkworker "go.temporal.io/sdk/worker"

	"github.com/retrain-ml/retrain/examples/customnode/httpcheck"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/worker"
	"github.com/retrain-ml/retrain/workflows"
)

// customPipelines is the example's pipeline folder, as its README runs it.
const customPipelines = "../examples/customnode/pipelines"

// startCustomWorker runs an in-process worker built the way
// examples/customnode builds its own: the built-in types plus http_check.
func startCustomWorker(t *testing.T, queue string) {
	t.Helper()
	startWorkerWith(t, worker.Config{TaskQueue: queue, PipelinesDir: customPipelines}, worker.WithNodeTypes(httpcheck.Type(nil)))
}

// runPipeline starts a pipeline the worker on queue knows by name and waits.
func runPipeline(t *testing.T, queue, name string, params map[string]any) *runs.Result {
	t.Helper()
	return runRequest(t, runs.Request{Pipeline: name, Params: params, TaskQueue: queue}, 2*time.Minute)
}

// TestCustomNodeBetweenBuiltins runs the example pipeline endpoint-check
// (noop -> http_check -> command) on a worker with the custom type, against
// a real HTTP server: the built-in noop's outputs reach the custom node,
// and the custom node's outputs reach the built-in command downstream. A
// check that fails is retried and stops the run before the command.
func TestCustomNodeBetweenBuiltins(t *testing.T) {
	parallel(t)
	const body = `{"status":"serving","model":"ctr","version":"v7"}`
	var hits, warming atomic.Int64 // requests per path, from the server's goroutines
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			hits.Add(1)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, body)
		default:
			warming.Add(1)
			http.Error(w, "warming up", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	queue := newQueue(t)
	startCustomWorker(t, queue)
	url := srv.URL + "/health"

	res := runPipeline(t, queue, "endpoint-check", map[string]any{"url": url, "expect": `"serving"`})
	wantStatus(t, res, runs.StatusSucceeded)
	check := node(t, res, "check")
	sum := fmt.Sprintf("%x", sha256.Sum256([]byte(body)))
	if check.Type != httpcheck.Name || check.Outputs["status"] != float64(200) || check.Outputs["body_sha256"] != sum ||
		check.Outputs["bytes"] != float64(len(body)) || check.Outputs["content_type"] != "application/json" {
		t.Errorf("check node %+v", check)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("server got %d health requests, want 1", n)
	}
	want := fmt.Sprintf("%s answered 200: %d bytes, sha256 %s", url, len(body), sum)
	if got := node(t, res, "record").Outputs["stdout"]; got != want {
		t.Errorf("record stdout %q, want %q", got, want)
	}
	// The history replays against the current workflow code.
	replayer := sdkworker.NewWorkflowReplayer()
	workflows.Register(replayer)
	if err := replayer.ReplayWorkflowHistory(nil, history(t, tclient, res.ID)); err != nil {
		t.Errorf("replay: %v", err)
	}

	// An endpoint that never gets ready: three attempts (the example's
	// retry policy), then the run fails there and record never runs.
	res = runPipeline(t, queue, "endpoint-check", map[string]any{"url": srv.URL + "/ready"})
	wantStatus(t, res, runs.StatusFailed)
	check = node(t, res, "check")
	if check.Status != runs.NodeFailed || check.Attempts != 3 || !strings.Contains(check.Error, "status 503") ||
		!strings.Contains(check.Error, httpcheck.CheckFailed) {
		t.Errorf("failed check %+v", check)
	}
	if n := warming.Load(); n != 3 {
		t.Errorf("server got %d requests for /ready, want 3", n)
	}
	if rec := node(t, res, "record"); rec.Status == runs.NodeSucceeded || rec.Attempts != 0 {
		t.Errorf("record ran after a failed check: %+v", rec)
	}

	// The worker with the custom type still refuses a type nobody has,
	// and suggests its own.
	data, err := os.ReadFile(customPipelines + "/endpoint-check.yaml")
	if err != nil {
		t.Fatal(err)
	}
	typo := strings.Replace(string(data), "type: http_check", "type: http_chek", 1)
	res = runSpec(t, queue, typo, map[string]any{"url": url})
	wantStatus(t, res, runs.StatusFailed)
	if !strings.Contains(res.Error, `unknown type "http_chek"`) || !strings.Contains(res.Error, `did you mean "http_check"`) {
		t.Errorf("typo run error %q", res.Error)
	}
}

// TestCustomTypeUnknownToPlainWorker runs the example's spec on a worker
// without http_check: it fails validation before any node runs, naming the
// type, rather than reaching a worker that has no activity for it.
func TestCustomTypeUnknownToPlainWorker(t *testing.T) {
	data, err := os.ReadFile(customPipelines + "/endpoint-check.yaml")
	if err != nil {
		t.Fatal(err)
	}
	queue := newQueue(t)
	startWorker(t, queue)
	res := runSpec(t, queue, string(data), map[string]any{"url": "http://127.0.0.1:1/"})
	wantStatus(t, res, runs.StatusFailed)
	if !strings.Contains(res.Error, `unknown type "http_check"`) {
		t.Errorf("run error %q does not name the unknown type", res.Error)
	}
	if len(res.Nodes) != 0 {
		t.Errorf("nodes ran for a spec this worker cannot validate: %+v", res.Nodes)
	}
}
