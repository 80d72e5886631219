package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/dags/examples"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/worker"
	"github.com/retrain-ml/retrain/workflows"
)

// startProductionWorker runs an in-process worker configured as
// retrain-worker is by default: the example pipelines, and no inline
// specs unless cfg allows them. (startWorkerWith makes dev-style workers.)
func startProductionWorker(t *testing.T, cfg worker.Config) {
	t.Helper()
	cfg.Pipelines = examples.FS
	w, err := worker.New(context.Background(), tclient, server.Namespace(), cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
}

const policySpec = `name: inline-policy
nodes:
  - {id: a, type: command, with: {argv: [sh, -c, "echo ran"]}}
`

// TestInlineSpecPolicy: a worker without --allow-inline-specs fails a run
// that brings its own spec before any node, saying why and how to allow
// it, and still runs its own pipelines; one with the flag runs the spec.
func TestInlineSpecPolicy(t *testing.T) {
	refusing := newQueue(t)
	startProductionWorker(t, worker.Config{TaskQueue: refusing})
	res := runSpec(t, refusing, policySpec, nil)
	wantStatus(t, res, runs.StatusFailed)
	for _, want := range []string{workflows.InlineSpecsRefused, "--allow-inline-specs", "RETRAIN_ALLOW_INLINE_SPECS"} {
		if !strings.Contains(res.Error, want) {
			t.Errorf("refused run's error %q does not say %q", res.Error, want)
		}
	}
	if len(res.Nodes) != 0 {
		t.Errorf("a refused run reports nodes: %+v", res.Nodes)
	}
	if res.Pipeline != "inline-policy" {
		t.Errorf("refused run's pipeline = %q, want the spec's name", res.Pipeline)
	}
	t.Logf("refused: %s", res.Error)
	named := runRequest(t, runs.Request{Pipeline: "hello", TaskQueue: refusing}, 2*time.Minute)
	wantStatus(t, named, runs.StatusSucceeded)

	allowing := newQueue(t)
	startProductionWorker(t, worker.Config{TaskQueue: allowing, AllowInlineSpecs: true})
	wantStatus(t, runSpec(t, allowing, policySpec, nil), runs.StatusSucceeded)
}

// TestCommandAllowlist: with --allow-commands, a node whose program is not
// on the list fails at once, not retried, naming the program and the flag,
// while listed programs run.
func TestCommandAllowlist(t *testing.T) {
	queue := newQueue(t)
	startProductionWorker(t, worker.Config{TaskQueue: queue, AllowInlineSpecs: true, AllowCommands: []string{"sh", "python3"}})
	res := runSpec(t, queue, `name: allowlist
defaults:
  retry: {max_attempts: 3, initial_interval: 1s}
nodes:
  - {id: ok, type: command, with: {argv: [sh, -c, "echo listed"]}}
  - {id: refused, type: command, needs: [ok], with: {argv: [cat, /etc/hostname]}}
`, nil)
	wantStatus(t, res, runs.StatusFailed)
	if n := node(t, res, "ok"); n.Status != runs.NodeSucceeded || n.Outputs["stdout"] != "listed" {
		t.Errorf("listed program: %+v", n)
	}
	n := node(t, res, "refused")
	if n.Status != runs.NodeFailed || n.Attempts != 1 {
		t.Errorf("refused node: status %s after %d attempts, want failed after 1", n.Status, n.Attempts)
	}
	for _, want := range []string{`"cat"`, "--allow-commands", "sh,python3"} {
		if !strings.Contains(n.Error, want) {
			t.Errorf("refused node's error %q does not say %s", n.Error, want)
		}
	}
	t.Logf("refused: %s", n.Error)
}

// TestRunCLIResolvesFirst: `retrain run NAME` waits for the worker to
// resolve the pipeline, so an unknown name or a param its spec refuses
// exits non-zero with the resolver's message instead of "started".
func TestRunCLIResolvesFirst(t *testing.T) {
	queue := newQueue(t)
	startWorker(t, queue)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "no-such-pipeline"}, "no-such-pipeline"},
		{[]string{"run", "ctr-retrain", "-p", "seed=abc"}, "seed"},
	} {
		_, err := retrainCLI(t, append(c.args, "--task-queue", queue)...)
		if err == nil || !strings.Contains(err.Error(), "is invalid") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("retrain %s: %v; want the resolver's error naming %q", strings.Join(c.args, " "), err, c.want)
			continue
		}
		t.Logf("retrain %s: %v", strings.Join(c.args, " "), strings.SplitN(err.Error(), "\n", 2)[0])
	}
	out, err := retrainCLI(t, "run", "hello", "--task-queue", queue)
	if err != nil || !strings.HasPrefix(out, "hello-") {
		t.Fatalf("retrain run hello: %q, %v", out, err)
	}
}
