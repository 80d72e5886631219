package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/internal/storage"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/worker"
)

// startStoreWorker runs an in-process worker on queue whose checkpoints
// and models live on srv.
func startStoreWorker(t *testing.T, queue string, srv *s3test.Server) {
	t.Helper()
	startWorkerWith(t, worker.Config{TaskQueue: queue, Store: storage.Config{S3: srv.Config("")}})
}

// shipSpec deploys a candidate, smoke-tests it, and on failure moves
// production back to what it named before this run's deploy.
const shipSpec = `
name: ship
params:
  candidate: {type: string, description: "folder of model files"}
  hook: {type: string, description: "webhook URL"}
  fail_smoke: {type: bool, default: false}
nodes:
  - id: deploy
    type: deploy
    with:
      model: ctr
      dir: ${params.candidate}
      metrics: {auc: 0.9}
      webhooks: ["${params.hook}"]
      webhook_attempts: 1
  - id: smoke
    type: command
    needs: [deploy]
    retry: {max_attempts: 1}
    with:
      argv: ["sh", "-c", "if [ \"$1\" = fail=true ]; then echo 'smoke test failed' >&2; exit 1; fi; echo ok", "sh", "fail=${params.fail_smoke}"]
on_failure:
  - id: undeploy
    type: rollback_model
    compensates: deploy
    with:
      model: ctr
      from: ${nodes.deploy.outputs.version}
      to: ${nodes.deploy.outputs.previous_version}
`

// hookRecorder is a webhook receiver that records the versions it is told
// about.
type hookRecorder struct {
	mu       sync.Mutex
	versions []string
}

func (h *hookRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var ev struct {
		Version string `json:"version"`
	}
	b, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(b, &ev); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	h.versions = append(h.versions, ev.Version)
	h.mu.Unlock()
}

func (h *hookRecorder) got() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.versions...)
}

func modelDir(t *testing.T, content string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "model.bin"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func ship(t *testing.T, queue, candidate, hook string, fail bool) *runs.Result {
	t.Helper()
	return runSpec(t, queue, shipSpec, map[string]any{"candidate": candidate, "hook": hook, "fail_smoke": fail})
}

// moves returns the history of ctr's production alias as "kind:from->to".
func moves(t *testing.T, reg *models.Registry) []string {
	t.Helper()
	history, err := reg.History(context.Background(), "ctr", models.DefaultAlias)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range history {
		out = append(out, fmt.Sprintf("%s:%s->%s", m.Kind, m.From, m.To))
	}
	return out
}

// TestDeployRolledBackOnFailure deploys v1, then deploys v2 in a run whose
// smoke test fails: the on_failure compensation moves production back to
// v1, and the history records the three moves once each.
func TestDeployRolledBackOnFailure(t *testing.T) {
	srv := s3test.Start(t)
	reg := models.New(srv.Open(t, ""))
	queue := newQueue(t)
	startStoreWorker(t, queue, srv)
	hooks := &hookRecorder{}
	hookSrv := httptest.NewServer(hooks)
	defer hookSrv.Close()

	res := ship(t, queue, modelDir(t, "weights-1"), hookSrv.URL, false)
	wantStatus(t, res, runs.StatusSucceeded)
	if out := node(t, res, "deploy").Outputs; out["version"] != "v1" || out["previous_version"] != "" || out["webhooks_ok"] != float64(1) {
		t.Fatalf("first deploy outputs %v", out)
	}

	res = ship(t, queue, modelDir(t, "weights-2"), hookSrv.URL, true)
	wantStatus(t, res, runs.StatusFailed)
	deploy := node(t, res, "deploy")
	if deploy.Status != runs.NodeSucceeded || deploy.Outputs["version"] != "v2" || deploy.Outputs["previous_version"] != "v1" {
		t.Fatalf("second deploy %+v", deploy)
	}
	if len(res.Compensations) != 1 {
		t.Fatalf("compensations %+v", res.Compensations)
	}
	undo := res.Compensations[0]
	if undo.ID != "undeploy" || undo.Status != runs.NodeSucceeded || undo.Outputs["from"] != "v2" || undo.Outputs["to"] != "v1" || undo.Outputs["changed"] != true {
		t.Fatalf("compensation %+v", undo)
	}

	v, err := reg.Resolve(context.Background(), "ctr")
	if err != nil || v.Version != "v1" {
		t.Fatalf("production = %s, %v; want v1", v.Version, err)
	}
	want := []string{"promote:->v1", "promote:v1->v2", "rollback:v2->v1"}
	if got := moves(t, reg); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("history %v, want %v", got, want)
	}
	if got := hooks.got(); fmt.Sprint(got) != "[v1 v2]" {
		t.Errorf("webhook saw %v, want [v1 v2]", got)
	}
}

// TestCLIModelRollback deploys twice through pipeline runs, then runs
// `retrain model rollback`, in process, against the same store found
// through a dev stack data dir: production goes back to the first version
// and `retrain model history` shows all three moves.
func TestCLIModelRollback(t *testing.T) {
	srv := s3test.Start(t)
	queue := newQueue(t)
	startStoreWorker(t, queue, srv)
	hookSrv := httptest.NewServer(&hookRecorder{})
	defer hookSrv.Close()
	for i := 1; i <= 2; i++ {
		res := ship(t, queue, modelDir(t, fmt.Sprintf("weights-%d", i)), hookSrv.URL, false)
		wantStatus(t, res, runs.StatusSucceeded)
	}
	dataDir := t.TempDir()
	if err := storage.WriteDevConnection(dataDir, srv.Config("")); err != nil {
		t.Fatal(err)
	}
	retrain := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		app := &cli.App{Out: &out, Err: &errOut, LogLevel: "warn"}
		root := cli.NewRoot(app, "retrain")
		root.SetArgs(append(args, "--data-dir", dataDir))
		err := root.ExecuteContext(context.Background())
		if err != nil {
			return out.String(), fmt.Errorf("%w\n%s", err, errOut.String())
		}
		return out.String(), nil
	}

	// v1 may be trained for an earlier logical time than v2 (each run's
	// is its start time, to the second): an operator's rollback to an
	// older version needs --force (TestModelMoveForce covers the refusal).
	out, err := retrain("model", "rollback", "ctr", "--force", "--reason", "bad canary")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "v2 -> v1") {
		t.Fatalf("rollback printed %q", out)
	}
	out, err = retrain("model", "show", "ctr", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var v models.Version
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.Version != "v1" || v.Metrics["auc"] != 0.9 {
		t.Fatalf("show ctr = %+v, %v (%s)", v, err, out)
	}
	out, err = retrain("model", "history", "ctr", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var history []models.Move
	if err := json.Unmarshal([]byte(out), &history); err != nil {
		t.Fatalf("history is not JSON: %v\n%s", err, out)
	}
	var got []string
	for _, m := range history {
		got = append(got, fmt.Sprintf("%d %s %s->%s", m.Seq, m.Kind, m.From, m.To))
	}
	want := []string{"1 promote ->v1", "2 promote v1->v2", "3 rollback v2->v1"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("history %v, want %v", got, want)
	}
	if history[2].Reason != "bad canary" || history[1].Actor.Run == "" {
		t.Errorf("history does not say who and why: %+v", history)
	}
	// The table view too.
	out, err = retrain("model", "list", "ctr")
	if err != nil || !strings.Contains(out, "production") || strings.Count(out, "\nv") != 2 {
		t.Fatalf("list: %v\n%s", err, out)
	}
	// @version and @alias references.
	if out, err = retrain("model", "show", "ctr@v2"); err != nil || !strings.Contains(strings.Join(strings.Fields(out), " "), "version v2") {
		t.Fatalf("show ctr@v2: %v\n%s", err, out)
	}
	if _, err = retrain("model", "show", "ctr@staging"); !errors.Is(err, models.ErrNotFound) {
		t.Fatalf("show of an unknown alias: %v", err)
	}
}

// TestBadStorageFailsBeforeAnyWrite: a wrong endpoint or credentials stop
// a worker at start and fail CLI commands with a clear message, and keys
// that would escape the store are refused, in specs before a run starts.
func TestBadStorageFailsBeforeAnyWrite(t *testing.T) {
	srv := s3test.Start(t)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	ctx := context.Background()

	bad := []struct {
		name string
		edit func(*s3store.Config)
		msg  string
	}{
		{"unreachable endpoint", func(c *s3store.Config) { c.Endpoint = "http://127.0.0.1:1" }, "127.0.0.1:1"},
		{"wrong secret", func(c *s3store.Config) { c.SecretAccessKey = "wrong-secret-wrong-secret" }, "access denied"},
		{"no such bucket", func(c *s3store.Config) { c.URI = "s3://no-such-bucket" }, "does not exist"},
	}
	for _, b := range bad {
		t.Run("worker/"+b.name, func(t *testing.T) {
			cfg := srv.Config("")
			b.edit(&cfg)
			start := time.Now()
			_, err := worker.New(ctx, tclient, server.Namespace(), worker.Config{TaskQueue: newQueue(t), Store: storage.Config{S3: cfg}}, quiet)
			if err == nil || !strings.Contains(err.Error(), "object store") || !strings.Contains(err.Error(), b.msg) {
				t.Fatalf("worker.New: %v; want an object store error saying %q", err, b.msg)
			}
			if strings.Contains(err.Error(), cfg.SecretAccessKey) {
				t.Fatalf("error holds the secret: %v", err)
			}
			t.Logf("worker refused to start after %v: %v", time.Since(start).Round(time.Millisecond), err)
		})
		t.Run("cli/"+b.name, func(t *testing.T) {
			cfg := srv.Config("")
			b.edit(&cfg)
			t.Setenv("AWS_ACCESS_KEY_ID", cfg.AccessKeyID)
			t.Setenv("AWS_SECRET_ACCESS_KEY", cfg.SecretAccessKey)
			var out, errOut bytes.Buffer
			root := cli.NewRoot(&cli.App{Out: &out, Err: &errOut, LogLevel: "warn"}, "retrain")
			root.SetArgs([]string{"model", "register", "ctr", modelDir(t, "w"), "--s3-uri", cfg.URI, "--s3-endpoint", cfg.Endpoint})
			err := root.ExecuteContext(ctx)
			if err == nil || !strings.Contains(err.Error(), b.msg) {
				t.Fatalf("retrain model register: %v; want an error saying %q", err, b.msg)
			}
		})
	}

	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	for _, args := range [][]string{
		{"model", "register", "../../etc", modelDir(t, "w")},
		{"model", "register", "ctr", modelDir(t, "w"), "--version", "v1/../../x"},
		{"model", "promote", "ctr", "..", "--alias", "production"},
		{"model", "list", "ctr", "--s3-uri", "s3://" + srv.Bucket + "/a/../../b"},
	} {
		var out, errOut bytes.Buffer
		root := cli.NewRoot(&cli.App{Out: &out, Err: &errOut, LogLevel: "warn"}, "retrain")
		if !slices.Contains(args, "--s3-uri") {
			args = append(args, "--s3-uri", srv.URI(""))
		}
		root.SetArgs(append(args, "--s3-endpoint", srv.Endpoint))
		err := root.ExecuteContext(ctx)
		if err == nil || !(strings.Contains(err.Error(), "name") || strings.Contains(err.Error(), "path segment")) {
			t.Errorf("retrain %v: %v; want a naming error", args, err)
		}
	}

	// A spec that names a model outside the registry's rules never starts a node.
	queue := newQueue(t)
	startStoreWorker(t, queue, srv)
	res := runSpec(t, queue, "name: escape\nnodes:\n  - {id: d, type: deploy, with: {model: \"../../x\", dir: /tmp}}\n", nil)
	wantStatus(t, res, runs.StatusFailed)
	if len(res.Nodes) != 0 || !strings.Contains(res.Error, "model name") {
		t.Fatalf("run of an escaping spec: %+v", res)
	}
	if keys := srv.Keys(t); len(keys) != 0 {
		t.Fatalf("bad input wrote %v", keys)
	}
}

// TestCheckpointNodeKilledAndResumed runs a checkpoint node on a worker
// process that is killed once half of the node's Parquet files are in S3.
// Temporal retries the node on another worker, which writes one complete
// checkpoint with every row. The run then fails downstream; rerunning it
// (same run id) reuses the checkpoint without running its command again.
func TestCheckpointNodeKilledAndResumed(t *testing.T) {
	parallel(t)
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	// Child workers take their store from the environment, as
	// retrain-worker does.
	env := childStoreEnv(srv)

	queue := newQueue(t)
	dir := t.TempDir()
	const rows, perFile = 2000, 100
	script := fmt.Sprintf(`echo run >> %[1]s/runs
echo id,score,name
i=1
while [ $i -le %[2]d ]; do
  echo "$i,$i.5,n$i"
  if [ $i -eq 1200 ] && [ ! -e %[1]s/paused ]; then touch %[1]s/paused; sleep 30; fi
  i=$((i+1))
done`, dir, rows)
	spec := fmt.Sprintf(`
name: ckpt
nodes:
  - id: features
    type: checkpoint
    heartbeat: 5s
    retry: {initial_interval: 100ms}
    with:
      command: ["sh", "-c", %q]
      columns: {id: int64, score: double, name: string}
      max_file_rows: %d
  - id: train
    type: command
    needs: [features]
    retry: {max_attempts: 1}
    with: {argv: ["sh", "-c", "test ! -e %s/fail && echo trained on ${nodes.features.outputs.rows} rows"]}
`, script, perFile, dir)
	if err := os.WriteFile(filepath.Join(dir, "fail"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	countRuns := func() int {
		b, _ := os.ReadFile(filepath.Join(dir, "runs"))
		return strings.Count(string(b), "\n")
	}
	parquetFiles := func() int {
		n := 0
		for o, err := range st.List(context.Background(), "checkpoints/") {
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(o.Key, ".parquet") {
				n++
			}
		}
		return n
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first := startChildWorker(t, queue, env...)
	run, err := runs.Start(ctx, tclient, runs.Request{Spec: []byte(spec), TaskQueue: queue})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, func() bool { return parquetFiles() >= rows/perFile/2 })
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	startChildWorker(t, queue, env...)

	res, err := runs.Wait(ctx, tclient, run.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, runs.StatusFailed)
	features := node(t, res, "features")
	if features.Status != runs.NodeSucceeded || features.Attempts != 2 || features.Outputs["rows"] != float64(rows) ||
		features.Outputs["files"] != float64(rows/perFile) || features.Outputs["reused"] != false {
		t.Fatalf("features after the kill: %+v", features)
	}
	if got := parquetFiles(); got != rows/perFile {
		t.Fatalf("%d Parquet files in S3, want %d: the killed attempt's files should be gone", got, rows/perFile)
	}
	if countRuns() != 2 {
		t.Fatalf("command ran %d times, want 2", countRuns())
	}

	// Fix the failure and run again under the same id: the checkpoint is
	// reused, the command does not run.
	if err := os.Remove(filepath.Join(dir, "fail")); err != nil {
		t.Fatal(err)
	}
	if _, err := runs.Start(ctx, tclient, runs.Request{Spec: []byte(spec), TaskQueue: queue, ID: run.ID}); err != nil {
		t.Fatal(err)
	}
	res, err = runs.Wait(ctx, tclient, run.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, runs.StatusSucceeded)
	again := node(t, res, "features")
	if again.Outputs["reused"] != true || again.Outputs["uri"] != features.Outputs["uri"] || countRuns() != 2 {
		t.Fatalf("rerun: features %+v, command runs %d", again, countRuns())
	}
	if out := node(t, res, "train").Outputs["stdout"]; out != fmt.Sprintf("trained on %d rows", rows) {
		t.Fatalf("train printed %q", out)
	}
}

// TestShipExample runs the shipped example pipeline twice: a deploy, then
// one whose smoke test fails and is rolled back.
func TestShipExample(t *testing.T) {
	srv := s3test.Start(t)
	reg := models.New(srv.Open(t, ""))
	t.Setenv("TMPDIR", t.TempDir()) // where its train step writes models
	queue := newQueue(t)
	startStoreWorker(t, queue, srv)
	run := func(params map[string]any) *runs.Result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		r, err := runs.Start(ctx, tclient, runs.Request{Pipeline: "ship", Params: params, TaskQueue: queue})
		if err != nil {
			t.Fatal(err)
		}
		res, err := runs.Wait(ctx, tclient, r.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := run(map[string]any{"rows": 500})
	wantStatus(t, res, runs.StatusSucceeded)
	if out := node(t, res, "data").Outputs; out["rows"] != float64(500) {
		t.Fatalf("data outputs %v", out)
	}
	res = run(map[string]any{"rows": 500, "fail_smoke": true})
	wantStatus(t, res, runs.StatusFailed)
	if len(res.Compensations) != 1 || res.Compensations[0].Status != runs.NodeSucceeded {
		t.Fatalf("compensations %+v", res.Compensations)
	}
	v, err := reg.Resolve(context.Background(), "ctr")
	if err != nil || v.Version != "v1" || v.Metrics["auc"] != 0.71 || len(v.DataSnapshots) != 1 {
		t.Fatalf("production = %+v, %v", v, err)
	}
	want := []string{"promote:->v1", "promote:v1->v2", "rollback:v2->v1"}
	if got := moves(t, reg); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("history %v, want %v", got, want)
	}
}
