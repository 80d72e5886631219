package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/activities/checkpoint"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/nodetype"

	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/models"
)

// candidate writes a model folder whose single file holds content.
func candidate(t *testing.T, content string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "model.bin"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func deployInput(run, node string, with map[string]any) nodetype.Input {
	return nodetype.Input{Pipeline: "train", RunID: run, Node: node, Type: "deploy", With: with}
}

// runAs runs a node as the worker does: `with` decoded with its defaults,
// the outputs through JSON; they are read back as an O.
func runAs[O any](ctx context.Context, typ nodetype.Type, in nodetype.Input) (O, error) {
	var out O
	if in.Secrets == nil {
		in.Secrets = nodetest.SpecSecrets(in.With) // as the workflow sends a spec's `with`
	}
	m, err := typ.Run(ctx, in)
	if err != nil {
		return out, err
	}
	err = nodetype.Decode(m, &out)
	return out, err
}

func runDeploy(ctx context.Context, m *Models, in nodetype.Input) (DeployOutputs, error) {
	return runAs[DeployOutputs](ctx, m.deployType(), in)
}

func runRollback(ctx context.Context, m *Models, in nodetype.Input) (RollbackModelOutputs, error) {
	return runAs[RollbackModelOutputs](ctx, m.rollbackModelType(), in)
}

func newModels(t *testing.T) (*Models, *models.Registry, *s3test.Server) {
	t.Helper()
	srv := s3test.Start(t)
	st := srv.Open(t, "reg")
	return &Models{Store: st, Logger: quiet, webhookBackoff: 10 * time.Millisecond}, models.New(st), srv
}

// TestDeployKilledBetweenRegisterAndMove kills the process running a deploy
// after the candidate is registered and before the alias moves. The retry
// finds the version instead of registering a second one and finishes the
// move, which the history records once.
func TestDeployKilledBetweenRegisterAndMove(t *testing.T) {
	t.Parallel()
	m, reg, srv := newModels(t)
	ctx := t.Context()
	in := deployInput("run-1", "deploy", map[string]any{"model": "ctr", "dir": candidate(t, "weights-1")})

	child := startChild(t, "deploy-crash-after-register", srv, "reg", in)
	err := child.Wait()
	if ws, ok := child.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child was not killed: %v", err)
	}
	if vs, err := reg.List(ctx, "ctr"); err != nil || len(vs) != 1 {
		t.Fatalf("after the crash: versions %v, %v; want the one registered", vs, err)
	}
	if _, err := reg.Resolve(ctx, "ctr"); !errors.Is(err, models.ErrNotFound) {
		t.Fatalf("production set before the move: %v", err)
	}

	// Temporal's retry runs the same input again, twice here: once to
	// finish, once more as if the completion had been lost.
	for attempt := 2; attempt <= 3; attempt++ {
		out, err := runDeploy(ctx, m, in)
		if err != nil {
			t.Fatalf("attempt %d: %v", attempt, err)
		}
		if out.Version != "v1" || !out.Moved || out.PreviousVersion != "" || out.Seq != 1 {
			t.Fatalf("attempt %d: outputs %v", attempt, out)
		}
	}
	vs, err := reg.List(ctx, "ctr")
	if err != nil || len(vs) != 1 {
		t.Fatalf("versions %v, %v; want exactly one", vs, err)
	}
	history, err := reg.History(ctx, "ctr", models.DefaultAlias)
	if err != nil || len(history) != 1 || history[0].To != "v1" || history[0].Actor.Run != "run-1" {
		t.Fatalf("history %+v, %v; want one move to v1 by run-1", history, err)
	}
}

// TestConcurrentDeploys runs 8 deploys of different candidates at once:
// each registers its own version and moves the alias exactly once, every
// move starts from the version the one before it set (so each was a valid
// compare-and-swap), and the alias ends at the last move's version.
func TestConcurrentDeploys(t *testing.T) {
	t.Parallel()
	m, reg, _ := newModels(t)
	ctx := t.Context()
	const n = 8
	outs := make([]DeployOutputs, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		dir := candidate(t, fmt.Sprintf("weights-%d", i))
		wg.Go(func() {
			outs[i], errs[i] = runDeploy(ctx, m, deployInput(fmt.Sprintf("run-%d", i), "deploy", map[string]any{"model": "ctr", "dir": dir}))
		})
	}
	wg.Wait()
	deployed := map[string]string{} // version -> run
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("deploy %d: %v", i, errs[i])
		}
		v := outs[i].Version
		if _, dup := deployed[v]; dup || !outs[i].Moved {
			t.Fatalf("deploy %d: outputs %v (version taken twice or not moved)", i, outs[i])
		}
		deployed[v] = fmt.Sprintf("run-%d", i)
	}
	history, err := reg.History(ctx, "ctr", models.DefaultAlias)
	if err != nil {
		t.Fatal(err)
	}
	if len(history) != n {
		t.Fatalf("%d moves in the history, want %d: %+v", len(history), n, history)
	}
	prev := ""
	seen := map[string]bool{}
	for i, mv := range history {
		if mv.Seq != int64(i+1) || mv.From != prev || seen[mv.To] || deployed[mv.To] != mv.Actor.Run {
			t.Fatalf("move %d = %+v after %q: not a compare-and-swap from the previous move, or a repeat", i, mv, prev)
		}
		seen[mv.To] = true
		prev = mv.To
	}
	// Each deploy's previous_version is what its own move replaced.
	for i := range n {
		mv := history[outs[i].Seq-1]
		if mv.To != outs[i].Version || mv.From != outs[i].PreviousVersion {
			t.Errorf("deploy %d: outputs %v, its move %+v", i, outs[i], mv)
		}
	}
	cur, err := reg.Resolve(ctx, "ctr")
	if err != nil || cur.Version != prev {
		t.Fatalf("production = %s, %v; want %s (the last move)", cur.Version, err, prev)
	}
}

// TestConcurrentDeploysOfOneCandidate deploys the same files 8 times at
// once: one version is registered, one move recorded, and every deploy
// reports that version.
func TestConcurrentDeploysOfOneCandidate(t *testing.T) {
	t.Parallel()
	m, reg, _ := newModels(t)
	ctx := t.Context()
	dir := candidate(t, "weights")
	var wg sync.WaitGroup
	var failed atomic.Int32
	versions := make([]string, 8)
	for i := range 8 {
		wg.Go(func() {
			out, err := runDeploy(ctx, m, deployInput("run", "deploy", map[string]any{"model": "ctr", "dir": dir, "version": "v7"}))
			if err != nil {
				t.Errorf("deploy %d: %v", i, err)
				failed.Add(1)
				return
			}
			versions[i] = out.Version
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.FailNow()
	}
	for i, v := range versions {
		if v != "v7" {
			t.Fatalf("deploy %d reported version %v", i, v)
		}
	}
	vs, err := reg.List(ctx, "ctr")
	if err != nil || len(vs) != 1 {
		t.Fatalf("versions %v, %v; want exactly one", vs, err)
	}
	history, err := reg.History(ctx, "ctr", models.DefaultAlias)
	if err != nil || len(history) != 1 {
		t.Fatalf("history %+v, %v; want one move", history, err)
	}
}

// TestDeployWebhooks checks that webhooks get the new alias, that a failing
// one is retried and reported without undoing the deploy, and that
// credentials in webhook URLs stay out of the outputs.
func TestDeployWebhooks(t *testing.T) {
	t.Parallel()
	m, reg, _ := newModels(t)
	ctx := t.Context()

	var mu sync.Mutex
	var events []webhookEvent
	var flakyCalls atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		var ev webhookEvent
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &ev); err != nil || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
	})
	mux.HandleFunc("/flaky", func(w http.ResponseWriter, r *http.Request) {
		if flakyCalls.Add(1) < 3 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
		}
	})
	mux.HandleFunc("/gone", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	hooks := httptest.NewServer(mux)
	defer hooks.Close()
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL + "/reload?token=s3cret"
	down.Close() // nothing listens there any more

	out, err := runDeploy(ctx, m, deployInput("run-1", "deploy", map[string]any{
		"model": "ctr", "dir": candidate(t, "w"), "metrics": map[string]any{"auc": "0.91", "loss": 0.2},
		"webhooks": []any{hooks.URL + "/ok", hooks.URL + "/flaky", hooks.URL + "/gone", downURL},
	}))
	if err != nil {
		t.Fatalf("deploy failed because of webhooks: %v", err)
	}
	if v, err := reg.Resolve(ctx, "ctr"); err != nil || v.Version != "v1" || v.Metrics["auc"] != 0.91 {
		t.Fatalf("production = %+v, %v", v, err)
	}
	results := out.Webhooks
	want := []struct {
		ok       bool
		attempts int
	}{{true, 1}, {true, 3}, {false, 1}, {false, 3}}
	for i, w := range want {
		r := results[i]
		if (r.Error == "") != w.ok || r.Attempts != w.attempts {
			t.Errorf("webhook %d: %+v, want ok=%t after %d attempts", i, r, w.ok, w.attempts)
		}
	}
	if out.WebhooksOK != 2 || out.WebhooksFailed != 2 {
		t.Errorf("outputs %v", out)
	}
	b, _ := json.Marshal(out)
	if strings.Contains(string(b), "s3cret") {
		t.Errorf("webhook credentials in outputs: %s", b)
	}
	if len(events) != 1 || events[0].Version != "v1" || events[0].Model != "ctr" || events[0].Alias != "production" ||
		!strings.HasSuffix(events[0].URI, "/models/ctr/versions/v1/files/") || events[0].Run != "run-1" {
		t.Errorf("webhook events %+v", events)
	}
}

// TestRollbackModel covers the compensation of a deploy and a plain
// rollback.
func TestRollbackModel(t *testing.T) {
	t.Parallel()
	m, reg, _ := newModels(t)
	ctx := t.Context()
	deploy := func(run, content string) DeployOutputs {
		t.Helper()
		out, err := runDeploy(ctx, m, deployInput(run, "deploy", map[string]any{"model": "ctr", "dir": candidate(t, content)}))
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	rollback := func(with map[string]any) (RollbackModelOutputs, error) {
		with["model"] = "ctr"
		return runRollback(ctx, m, nodetype.Input{Pipeline: "train", RunID: "run-rb", Node: "undo", Type: "rollback_model", With: with})
	}
	production := func() string {
		t.Helper()
		v, err := reg.Resolve(ctx, "ctr")
		if err != nil {
			t.Fatal(err)
		}
		return v.Version
	}

	first := deploy("run-1", "one")
	if _, err := rollback(map[string]any{"from": first.Version, "to": first.PreviousVersion}); nodetest.ErrType(err) != errtype.BadInput {
		t.Fatalf("undoing the first deploy: %v; want %s (nothing to go back to)", err, errtype.BadInput)
	}
	second := deploy("run-2", "two")
	out, err := rollback(map[string]any{"from": second.Version, "to": second.PreviousVersion})
	if err != nil || !out.Changed || out.From != "v2" || out.To != "v1" || production() != "v1" {
		t.Fatalf("compensation: %v, %v; production %s", out, err, production())
	}
	// A retried compensation changes nothing.
	out, err = rollback(map[string]any{"from": second.Version, "to": second.PreviousVersion})
	if err != nil || out.Changed || production() != "v1" {
		t.Fatalf("retried compensation: %v, %v", out, err)
	}

	// A compensation never undoes someone else's later deploy.
	third := deploy("run-3", "three")
	deploy("run-4", "four")
	if _, err := rollback(map[string]any{"from": third.Version, "to": third.PreviousVersion}); nodetest.ErrType(err) != errtype.ConcurrentMove {
		t.Fatalf("undoing a deploy that was superseded: %v; want %s", err, errtype.ConcurrentMove)
	}
	if production() != "v4" {
		t.Fatalf("production %s after a refused compensation, want v4", production())
	}

	// Without from/to: undo the latest move.
	out, err = rollback(map[string]any{})
	if err != nil || out.To != "v3" || production() != "v3" {
		t.Fatalf("plain rollback: %v, %v", out, err)
	}
	history, err := reg.History(ctx, "ctr", models.DefaultAlias)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, mv := range history {
		kinds = append(kinds, mv.Kind+":"+mv.To)
	}
	want := []string{"promote:v1", "promote:v2", "rollback:v1", "promote:v3", "promote:v4", "rollback:v3"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("history %v, want %v", kinds, want)
	}
}

// TestModelStepsRejectBadInput checks that bad names, paths and URLs fail
// before anything is written, and that they are not retried.
func TestModelStepsRejectBadInput(t *testing.T) {
	t.Parallel()
	m, reg, srv := newModels(t)
	ctx := t.Context()
	dir := candidate(t, "w")
	cases := []struct {
		name string
		with map[string]any
	}{
		{"traversal in model name", map[string]any{"model": "../etc", "dir": dir}},
		{"slash in version", map[string]any{"model": "ctr", "dir": dir, "version": "v1/../../x"}},
		{"absolute alias", map[string]any{"model": "ctr", "dir": dir, "alias": "/production"}},
		{"no such dir", map[string]any{"model": "ctr", "dir": filepath.Join(dir, "missing")}},
		{"no such version", map[string]any{"model": "ctr", "version": "v9"}},
		{"neither dir nor version", map[string]any{"model": "ctr"}},
		{"bad webhook", map[string]any{"model": "ctr", "dir": dir, "webhooks": []any{"file:///etc/passwd"}}},
		{"bad metric", map[string]any{"model": "ctr", "dir": dir, "metrics": map[string]any{"auc": "high"}}},
		{"null metric", map[string]any{"model": "ctr", "dir": dir, "metrics": map[string]any{"auc": nil}}},
		{"NaN metric as text", map[string]any{"model": "ctr", "dir": dir, "metrics": map[string]any{"auc": "NaN"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := runDeploy(ctx, m, deployInput("run", "deploy", c.with))
			if nodetest.ErrType(err) != errtype.BadInput {
				t.Fatalf("error %v, want a %s error", err, errtype.BadInput)
			}
		})
	}
	if keys := srv.Keys(t); len(keys) != 0 {
		t.Fatalf("bad input wrote %v", keys)
	}
	if _, err := reg.List(ctx, "ctr"); err != nil {
		t.Fatal(err)
	}

	none := &Models{Logger: quiet}
	if _, err := runDeploy(ctx, none, deployInput("run", "deploy", map[string]any{"model": "ctr", "dir": dir})); nodetest.ErrType(err) != errtype.NoObjectStore {
		t.Fatalf("deploy without a store: %v", err)
	}
}

// TestMetricValues: a version's metrics are read by package number's rule
// (any Go number, numeric text), and only finite figures are recorded.
func TestMetricValues(t *testing.T) {
	got, err := metricValues(map[string]any{"auc": "0.81\n", "rows": 1200, "loss": json.Number("0.3"), "f": float32(0.5)})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]float64{"auc": 0.81, "rows": 1200, "loss": 0.3, "f": 0.5}; !maps.Equal(got, want) {
		t.Errorf("metricValues = %v, want %v", got, want)
	}
	for v, msg := range map[any]string{nil: "metrics: auc is null", math.Inf(1): "metrics: auc is +Inf", "Inf": `metrics: auc: "Inf" is not a finite number`, true: "metrics: auc: want a number, got bool true"} {
		if _, err := metricValues(map[string]any{"auc": v}); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("metricValues(auc: %#v) = %v, want an error containing %q", v, err, msg)
		}
	}
}

// TestTypesCheckWith validates `with` blocks of the new node types the way
// the spec validator does, before a run starts.
func TestTypesCheckWith(t *testing.T) {
	cases := []struct {
		typ  string
		with map[string]any
		ok   bool
	}{
		{"deploy", map[string]any{"model": "ctr", "dir": "out/model"}, true},
		{"deploy", map[string]any{"model": "ctr", "version": "${nodes.train.outputs.version}"}, true},
		{"deploy", map[string]any{"model": "ctr"}, false},
		{"deploy", map[string]any{"model": "a/b", "dir": "x"}, false},
		{"deploy", map[string]any{"model": "ctr", "dir": "x", "webhooks": []any{"ftp://x"}}, false},
		{"deploy", map[string]any{"model": "ctr", "dir": "x", "webhooks": []any{"${params.hook}"}}, true},
		{"rollback_model", map[string]any{"model": "ctr"}, true},
		{"rollback_model", map[string]any{"model": "ctr", "from": "v2"}, false},
		{"rollback_model", map[string]any{"model": "ctr", "from": "v2", "to": "v1"}, true},
		{"checkpoint", map[string]any{"command": []any{"gen"}}, true},
		{"checkpoint", map[string]any{"source": "a.csv"}, true},
		{"checkpoint", map[string]any{"source": "a.csv", "command": []any{"gen"}}, false},
		{"checkpoint", map[string]any{}, false},
		{"checkpoint", map[string]any{"source": "a.csv", "format": "xls"}, false},
		{"checkpoint", map[string]any{"source": "a.csv", "columns": map[string]any{"x": "decimal"}}, false},
		{"checkpoint", map[string]any{"source": "a.csv", "max_file_rows": float64(0)}, false},
	}
	reg := nodetest.Registry(t, append(Types(nil, quiet), checkpoint.Type(nil, quiet))...)
	for _, c := range cases {
		typ, ok := reg.Lookup(c.typ)
		if !ok {
			t.Fatalf("no node type %s", c.typ)
		}
		err := typ.Check(c.with)
		if (err == nil) != c.ok {
			t.Errorf("%s %v: error %v, want ok=%t", c.typ, c.with, err, c.ok)
		}
	}
}
