package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/internal/storage"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/worker"
)

// tolerantSpec is canarySpec with extra `with` lines and a node timeout
// ("" keeps the default).
func tolerantSpec(extra, timeout string) string {
	s := specEdit(canarySpec, "      interval: 2s\n", "      interval: 2s\n"+extra)
	if timeout != "" {
		s = specEdit(s, "    heartbeat: 10s\n", "    heartbeat: 10s\n    timeout: "+timeout+"\n")
	}
	return s
}

// specEdit replaces the first old in spec with new, and panics when spec
// has no old: an edit that silently did nothing would test another spec.
func specEdit(spec, old, new string) string {
	if !strings.Contains(spec, old) {
		panic(fmt.Sprintf("the spec has no %q to replace", old))
	}
	return strings.Replace(spec, old, new, 1)
}

// failIfEnded fails the test at once, with the run's error, when run id
// has already ended: a test waiting for a step would otherwise wait out
// its limit and say only that the step never came.
func (e *canaryEnv) failIfEnded(t *testing.T, id, what string) {
	t.Helper()
	d, err := tclient.DescribeWorkflowExecution(t.Context(), id, "")
	if err != nil || d.WorkflowExecutionInfo.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return
	}
	res := wait(t, id)
	t.Fatalf("run %s ended %s %s: %s", id, res.Status, what, res.Error)
}

func (e *canaryEnv) startSpec(t *testing.T, spec string, params map[string]any) string {
	t.Helper()
	run, err := runs.Start(t.Context(), tclient, runs.Request{Spec: []byte(spec), SpecFile: "canary-it.yaml", Params: params, TaskQueue: e.queue})
	if err != nil {
		t.Fatal(err)
	}
	return run.ID
}

// promProxy stands in front of the env's Prometheus: it may demand a
// bearer token, answer slowly, and rewrite chosen evaluations of the
// canary's p99 query (counted from 1) to a breaching value, so that
// which evaluations breach is known exactly.
type promProxy struct {
	token    string
	delay    time.Duration
	breachAt map[int]bool

	mu      sync.Mutex
	p99     int // evaluations of the canary's p99 query
	ctr     int // evaluations of the canary's ctr query
	refused int
	queried int
}

func (e *canaryEnv) proxy(t *testing.T, p *promProxy) string {
	t.Helper()
	target, _ := url.Parse(e.prom.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.token != "" && r.Header.Get("Authorization") != "Bearer "+p.token {
			p.mu.Lock()
			p.refused++
			p.mu.Unlock()
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		time.Sleep(p.delay)
		if r.URL.Path == "/api/v1/query" {
			if err := r.ParseForm(); err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			q := r.PostForm.Get("query")
			p.mu.Lock()
			p.queried++
			if strings.HasPrefix(q, "sum(rate(serving_clicks_total") && strings.Contains(q, `version="v2"`) {
				p.ctr++
			}
			if strings.HasPrefix(q, "histogram_quantile") && strings.Contains(q, `version="v2"`) {
				p.p99++
				if p.breachAt[p.p99] {
					r.PostForm.Set("query", "vector(0.9)") // p99 900 ms: over max 0.25
				}
			}
			p.mu.Unlock()
			body := r.PostForm.Encode()
			r.Body = http.NoBody
			r2 := r.Clone(r.Context())
			r2.Body = bodyOf(body)
			r2.ContentLength = int64(len(body))
			rp.ServeHTTP(w, r2)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// ctrEvaluations is how many times the canary's ctr query has been asked.
func (p *promProxy) ctrEvaluations() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ctr
}

// TestCanarySeriesAppearsLate: the canary's series appear only after the
// canary has evaluated its checks twice (the serving system exports them
// late); within the step's warmup those evaluations are inconclusive, not
// breaches, and the canary is promoted. The series appear after counted
// evaluations, not after a fixed time, so that a loaded machine, whose
// evaluations come late, still has evaluations that found no data.
func TestCanarySeriesAppearsLate(t *testing.T) {
	parallelFor(t, 75*time.Second)
	hidden := healthy
	hidden.Label = "v2-not-yet"
	e := newCanaryEnv(t, hidden)
	startStoreWorker(t, e.queue, e.srv)
	p := &promProxy{}
	params := e.params("30s")
	params["prom"] = e.proxy(t, p)
	id := e.startSpec(t, tolerantSpec("      warmup: 24s\n", ""), params)
	var split time.Time
	const unseen = 2
	waitFor(t, 2*time.Minute, func() bool {
		e.failIfEnded(t, id, "before its series appeared")
		if split.IsZero() {
			for _, s := range e.sim.Splits() {
				if s.CanaryPercent == 10 {
					split = s.Received
				}
			}
		}
		return p.ctrEvaluations() >= unseen
	})
	e.sim.Set("v2", healthy) // its series appear now
	t.Logf("split to 10%% at %s; v2's series exported from %s, after %d evaluations", split.Format(time.TimeOnly), time.Now().Format(time.TimeOnly), unseen)
	res := wait(t, id)
	decision, steps, out := canaryOutputs(t, res)
	logSteps(t, steps)
	t.Logf("decision %s: %v", decision, out["reason"])
	wantStatus(t, res, runs.StatusSucceeded)
	if decision != "promoted" {
		t.Fatalf("decision %q", decision)
	}
	c := steps[0].(map[string]any)["checks"].([]any)[0].(map[string]any)
	if c["inconclusive"].(float64) < unseen || c["breaches"] != 0.0 {
		t.Errorf("step 1's ctr check %v: want the first %d evaluations inconclusive, none breached", c, unseen)
	}
	e.wantMoves(t, []string{"promote:->v1", "promote:v1->v2"}, []string{"promote:->v2"}, []string{"v1/v2@10", "v1/v2@50", "v2/v2@100"})
}

// TestCanaryFailureLimit: under failure_limit 2, one breached evaluation
// of p99 among passes is tolerated and the canary promoted; two in a row
// roll it back, the breach naming the two evaluations.
func TestCanaryFailureLimit(t *testing.T) {
	parallelFor(t, 25*time.Second)
	t.Run("one breach", func(t *testing.T) {
		t.Parallel()
		e := newCanaryEnv(t, healthy)
		startStoreWorker(t, e.queue, e.srv)
		p := &promProxy{breachAt: map[int]bool{2: true}}
		params := e.params("8s")
		params["prom"] = e.proxy(t, p)
		res := wait(t, e.startSpec(t, tolerantSpec("      failure_limit: 2\n", ""), params))
		decision, steps, out := canaryOutputs(t, res)
		logSteps(t, steps)
		t.Logf("decision %s: %v", decision, out["reason"])
		wantStatus(t, res, runs.StatusSucceeded)
		c := steps[0].(map[string]any)["checks"].([]any)[1].(map[string]any)
		if decision != "promoted" || c["breaches"] != 1.0 {
			t.Fatalf("decision %q, step 1's p99 %v", decision, c)
		}
	})
	t.Run("two in a row", func(t *testing.T) {
		t.Parallel()
		e := newCanaryEnv(t, healthy)
		startStoreWorker(t, e.queue, e.srv)
		p := &promProxy{breachAt: map[int]bool{2: true, 3: true}}
		params := e.params("8s")
		params["prom"] = e.proxy(t, p)
		res := wait(t, e.startSpec(t, tolerantSpec("      failure_limit: 2\n", ""), params))
		decision, steps, out := canaryOutputs(t, res)
		logSteps(t, steps)
		wantStatus(t, res, runs.StatusFailed)
		b, _ := out["breach"].(map[string]any)
		t.Logf("decision %s, breach %v", decision, b)
		evs, _ := b["evaluations"].([]any)
		if decision != "rolled_back" || b["check"] != "p99_latency" || len(evs) != 2 || !strings.Contains(b["reason"].(string), "2 consecutive breached evaluations of failure_limit 2") {
			t.Fatalf("decision %q, breach %v", decision, b)
		}
		// The proxy breaches its 2nd and 3rd queries: both in step 1 when
		// its bake holds three evaluations, else the 3rd opens step 2 (a
		// loaded machine evaluates late). Two in a row roll back either way.
		splits := []string{"v1/v2@10", "v1/v1@0"}
		if b["step"] == 2.0 {
			splits = []string{"v1/v2@10", "v1/v2@50", "v1/v1@0"}
		}
		e.wantMoves(t, []string{"promote:->v1"}, []string{"promote:->v2", "rollback:v2->v1"}, splits)
	})
}

// TestCanaryPrometheusBearerToken: a Prometheus behind a proxy that
// demands a bearer token is queried with the worker's secret; the token
// is in no output.
func TestCanaryPrometheusBearerToken(t *testing.T) {
	parallelFor(t, 24*time.Second)
	const token = "prom-token-5f3a"
	// The worker reads the token from its secrets folder (an environment
	// variable would be shared by the tests running in parallel).
	secrets := t.TempDir()
	if err := os.WriteFile(filepath.Join(secrets, "PROM_TOKEN"), []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newCanaryEnv(t, healthy)
	startWorkerWith(t, worker.Config{TaskQueue: e.queue, Store: storage.Config{S3: e.srv.Config("")},
		Env: progenv.Policy{SecretsDir: secrets}})
	p := &promProxy{token: token}
	params := e.params("6s")
	params["prom"] = e.proxy(t, p)
	res := wait(t, e.startSpec(t, tolerantSpec("      prometheus_bearer_token: ${secret.PROM_TOKEN}\n", ""), params))
	decision, steps, out := canaryOutputs(t, res)
	logSteps(t, steps)
	wantStatus(t, res, runs.StatusSucceeded)
	p.mu.Lock()
	queried, refused := p.queried, p.refused
	p.mu.Unlock()
	t.Logf("decision %s; the proxy answered %d queries with the token, refused %d", decision, queried, refused)
	if decision != "promoted" || queried == 0 || refused != 0 {
		t.Fatalf("decision %q, %d queries answered, %d refused", decision, queried, refused)
	}
	if b, _ := jsonOf(out); strings.Contains(b, token) {
		t.Error("the token is in the canary's outputs")
	}
}

// TestCanarySlowServingNeverPartial: a webhook that answers in 4 s and a
// Prometheus that answers in 3 s, with bakes (2 x 30 s) that leave one
// minute of the node's 2m timeout: the canary ends decided, promoted or
// rolled back with 0% sent, never at a partial split.
func TestCanarySlowServingNeverPartial(t *testing.T) {
	parallelFor(t, 90*time.Second)
	e := newCanaryEnv(t, healthy)
	startStoreWorker(t, e.queue, e.srv)
	slowHook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(4 * time.Second)
		e.sim.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(slowHook.Close)
	params := e.params("30s")
	params["prom"] = e.proxy(t, &promProxy{delay: 3 * time.Second})
	params["hook"] = slowHook.URL + "/webhook"
	start := time.Now()
	res := wait(t, e.startSpec(t, tolerantSpec("", "2m"), params))
	took := time.Since(start)
	decision, steps, out := canaryOutputs(t, res)
	logSteps(t, steps)
	splits := e.splits()
	t.Logf("after %s: run %s, decision %s: %v; webhook splits %v", took.Round(time.Second), res.Status, decision, out["reason"], splits)
	if len(splits) == 0 {
		t.Fatal("the webhook heard nothing")
	}
	last := e.sim.Splits()[len(splits)-1]
	switch decision {
	case "promoted":
		if last.CanaryPercent != 100 {
			t.Errorf("promoted, but serving's last word is %v%%", last.CanaryPercent)
		}
	case "rolled_back":
		if last.CanaryPercent != 0 || last.Canary != "v1" {
			t.Errorf("rolled back, but serving's last word is %+v", last)
		}
		e.wantMoves(t, []string{"promote:->v1"}, []string{"promote:->v2", "rollback:v2->v1"}, nil)
	default:
		t.Errorf("decision %q (run %s)", decision, res.Status)
	}
	if took > 2*time.Minute+10*time.Second {
		t.Errorf("took %s, past the node's timeout", took)
	}
}

func bodyOf(s string) io.ReadCloser { return io.NopCloser(strings.NewReader(s)) }

func jsonOf(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}
