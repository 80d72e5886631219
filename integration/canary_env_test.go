package integration

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	canarynode "github.com/retrain-ml/retrain/activities/canary"
	"github.com/retrain-ml/retrain/internal/canary"
	"github.com/retrain-ml/retrain/internal/devkit/promtest"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/devkit/servingsim"
	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/internal/storage"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/worker"
)

// canarySpec canaries ctr@v2 against production (v1) in two steps of
// ${params.bake}, checking every 2 s the canary's CTR against
// production's (at most 5% worse, on at least 50 impressions) and its p99
// latency (at most 250 ms). A failed canary runs the on_failure
// compensation of prep, as a failed run does. Its heartbeat is 10 s: the
// canary tests run in parallel on a shared machine, where a 2 s heartbeat
// can time out under load; the worker-kill test sets 2 s itself.
const canarySpec = `
name: canary-it
params:
  prom: {type: string}
  hook: {type: string}
  bake: {type: string, default: "6s"}
nodes:
  - {id: prep, type: noop}
  - id: canary
    type: canary
    needs: [prep]
    heartbeat: 10s
    retry: {max_attempts: 3, initial_interval: 200ms}
    with:
      model: ctr
      version: v2
      prometheus_url: ${params.prom}
      prometheus_hosts: [127.0.0.1]
      webhooks: ["${params.hook}"]
      webhook_attempts: 1
      interval: 2s
      steps: [{percent: 10, bake: "${params.bake}"}, {percent: 50, bake: "${params.bake}"}, {percent: 100}]
      checks:
        - name: ctr
          query: 'sum(rate(serving_clicks_total{version="$${version}"}[5s])) / sum(rate(serving_impressions_total{version="$${version}"}[5s]))'
          direction: higher_is_better
          min_relative_change: -0.05
          count_query: 'sum(increase(serving_impressions_total{version="$${version}"}[5s]))'
          min_count: 50
        - name: p99_latency
          query: 'histogram_quantile(0.99, sum by (le) (rate(serving_latency_seconds_bucket{version="$${version}"}[5s])))'
          max: 0.25
on_failure:
  - {id: undo_prep, type: noop, compensates: prep}
`

// canaryEnv is a canary's world: the registry with ctr v1 in production
// and v2 registered, a serving stand-in, and a Prometheus scraping it.
type canaryEnv struct {
	srv   *s3test.Server
	reg   *models.Registry
	sim   *servingsim.Sim
	prom  *promtest.Server
	hook  string
	queue string
}

var tester = models.Actor{Name: "integration-test"}

func newCanaryEnv(t *testing.T, v2 servingsim.Behaviour) *canaryEnv {
	t.Helper()
	return newCanaryEnvDated(t, v2, nil)
}

// notRegistered, as a version's logical time for newCanaryEnvDated,
// leaves the version for the canary to register.
const notRegistered = "(not registered)"

// newCanaryEnvDated is newCanaryEnv with versions trained for the given
// logical times (version -> RFC 3339; absent: none; notRegistered).
func newCanaryEnvDated(t *testing.T, v2 servingsim.Behaviour, logical map[string]string) *canaryEnv {
	t.Helper()
	if _, err := promtest.Binary(); err != nil {
		t.Skip(err)
	}
	e := &canaryEnv{srv: s3test.Start(t), queue: newQueue(t)}
	e.reg = models.New(e.srv.Open(t, ""))
	ctx := t.Context()
	for _, v := range []string{"v1", "v2", "v3"} {
		if logical[v] == notRegistered {
			continue
		}
		a, err := models.DirArtifacts(modelDir(t, "weights of "+v))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.reg.Register(ctx, "ctr", a, v, models.Meta{LogicalTime: logical[v]}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.reg.Promote(ctx, "ctr", "production", "v1", tester, "first deploy"); err != nil {
		t.Fatal(err)
	}
	e.sim = servingsim.New(2000, "v1", map[string]servingsim.Behaviour{
		"v1": {CTR: 0.10, Latency: 40 * time.Millisecond},
		"v2": v2,
		"v3": {CTR: 0.10, Latency: 40 * time.Millisecond},
	})
	stop := make(chan struct{})
	go e.sim.Run(stop)
	hs := httptest.NewServer(e.sim.Handler())
	t.Cleanup(func() { hs.Close(); close(stop) })
	e.hook = hs.URL + "/webhook"
	prom, err := promtest.Start(ctx, t.TempDir(), []string{strings.TrimPrefix(hs.URL, "http://")}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prom.Stop)
	e.prom = prom
	// Prometheus scrapes first some seconds after it is ready: wait until
	// production's series have three samples in the checks' 5 s windows.
	p := canary.Prometheus{URL: prom.URL}
	waitFor(t, 30*time.Second, func() bool {
		v, err := p.Query(ctx, `count_over_time(serving_impressions_total{version="v1"}[5s])`, time.Now())
		return err == nil && v != nil && *v >= 3
	})
	return e
}

// startMetricsWorker runs a worker with the env's store that serves its
// metrics, and returns their address.
func (e *canaryEnv) startMetricsWorker(t *testing.T) string {
	t.Helper()
	return startWorkerWith(t, worker.Config{
		TaskQueue: e.queue, MetricsAddr: "127.0.0.1:0", Store: storage.Config{S3: e.srv.Config("")},
	}).MetricsAddr()
}

func (e *canaryEnv) params(bake string) map[string]any {
	return map[string]any{"prom": e.prom.URL, "hook": e.hook, "bake": bake}
}

func (e *canaryEnv) start(t *testing.T, bake string) string {
	t.Helper()
	run, err := runs.Start(t.Context(), tclient, runs.Request{Spec: []byte(canarySpec), SpecFile: "canary-it.yaml",
		Params: e.params(bake), TaskQueue: e.queue})
	if err != nil {
		t.Fatal(err)
	}
	return run.ID
}

func wait(t *testing.T, id string) *runs.Result {
	t.Helper()
	// Generous: on a machine running every package's long forms at once a
	// canary run that takes a minute alone took over two.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	res, err := runs.Wait(ctx, tclient, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// history is an alias's moves as "kind:from->to".
func (e *canaryEnv) history(t *testing.T, alias string) []string {
	t.Helper()
	h, err := e.reg.History(t.Context(), "ctr", alias)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range h {
		out = append(out, fmt.Sprintf("%s:%s->%s", m.Kind, m.From, m.To))
	}
	return out
}

// splits are the webhook calls the stand-in got, as "production/canary@percent".
func (e *canaryEnv) splits() []string {
	var out []string
	for _, s := range e.sim.Splits() {
		out = append(out, fmt.Sprintf("%s/%s@%g", s.Production, s.Canary, s.CanaryPercent))
	}
	return out
}

// canaryState queries a running canary of run id.
func canaryState(ctx context.Context, id string) (canarynode.State, error) {
	var st canarynode.State
	v, err := tclient.QueryWorkflow(ctx, id+"/canary", "", canarynode.StateQuery)
	if err == nil {
		err = v.Get(&st)
	}
	return st, err
}

// waitBaking waits until run id's canary has evaluated its checks at step.
func waitBaking(t *testing.T, id string, step int) canarynode.State {
	t.Helper()
	var st canarynode.State
	waitFor(t, time.Minute, func() bool {
		var err error
		st, err = canaryState(t.Context(), id)
		return err == nil && st.Phase == "baking" && st.Step == step && len(st.Checks) > 0
	})
	return st
}

// canaryOutputs reads the canary node's outputs, on success or failure.
func canaryOutputs(t *testing.T, res *runs.Result) (decision string, steps []any, out map[string]any) {
	t.Helper()
	n := node(t, res, "canary")
	if n.Outputs == nil {
		t.Fatalf("canary %s has no outputs: %s", n.Status, n.Error)
	}
	decision, _ = n.Outputs["decision"].(string)
	steps, _ = n.Outputs["steps"].([]any)
	return decision, steps, n.Outputs
}

func logSteps(t *testing.T, steps []any) {
	t.Helper()
	for i, s := range steps {
		m := s.(map[string]any)
		t.Logf("  step %d: %v%% bake %v, %v .. %v: %v", i+1, m["percent"], m["bake"], m["started"], m["ended"], m["outcome"])
		for _, c := range m["checks"].([]any) {
			cm := c.(map[string]any)
			t.Logf("    %v: %v (canary %v, production %v, count %v, %v/%v samples passed) %v", cm["name"], cm["status"], cm["canary"], cm["production"], cm["count"], cm["passed"], cm["samples"], cm["reason"])
		}
	}
}

func equal(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }

// wantMoves checks the production and canary aliases' histories and the
// webhook's traffic splits against what a case expects; nil is not
// checked.
func (e *canaryEnv) wantMoves(t *testing.T, production, canary, splits []string) {
	t.Helper()
	for _, c := range []struct {
		alias string
		want  []string
	}{{"production", production}, {"canary", canary}} {
		if c.want == nil {
			continue
		}
		if got := e.history(t, c.alias); !equal(got, c.want) {
			t.Errorf("%s history %v, want %v", c.alias, got, c.want)
		}
	}
	if splits == nil {
		return
	}
	if got := e.splits(); !equal(got, splits) {
		t.Errorf("webhook splits %v, want %v", got, splits)
	}
}

// runBreached runs the canary with 6 s bakes, wants the run failed, and
// returns the run, the canary's decision, its steps (logged) and its breach.
func (e *canaryEnv) runBreached(t *testing.T) (res *runs.Result, decision string, steps []any, breach map[string]any) {
	t.Helper()
	res = wait(t, e.start(t, "6s"))
	wantStatus(t, res, runs.StatusFailed)
	decision, steps, out := canaryOutputs(t, res)
	logSteps(t, steps)
	breach, _ = out["breach"].(map[string]any)
	return res, decision, steps, breach
}
