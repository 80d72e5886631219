package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/runs"
)

// runsListSpec is a small pipeline with a gate on a param, and a check
// whose exit code is a param, so runs can pass, be rejected or fail.
const runsListSpec = `
name: %s
params:
  code: {type: int, default: 0}
  auc: {type: number, default: 0.71}
  sleep: {type: number, default: 0}
nodes:
  - {id: check, type: command, retry: {max_attempts: 1}, with: {argv: [sh, -c, "sleep ${params.sleep}; exit ${params.code}"]}}
  - id: gate
    type: gate
    needs: [check]
    with:
      candidate: {auc: "${params.auc}"}
      baseline: {auc: 0.69}
      metrics: {auc: {direction: higher_is_better, min_absolute_change: 0}}
`

// retrainCLI runs a retrain command against the test server.
func retrainCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := cli.NewRoot(&cli.App{Out: &out, Err: &errOut, LogLevel: "warn"}, "retrain")
	root.SetArgs(append(args, "--address", server.FrontendAddress(), "--namespace", server.Namespace()))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := root.ExecuteContext(ctx); err != nil {
		return out.String(), fmt.Errorf("retrain %s: %w\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), nil
}

// TestRunsList starts three runs of two small pipelines and lists them:
// status, pipeline, gate verdict and logical date, with the --pipeline and
// --status filters, through runs.List and `retrain runs list`.
func TestRunsList(t *testing.T) {
	queue := newQueue(t)
	startWorker(t, queue)
	suffix := time.Now().Format("150405.000")
	a, b := "runslist-a-"+strings.ReplaceAll(suffix, ".", ""), "runslist-b-"+strings.ReplaceAll(suffix, ".", "")
	start := func(name string, params map[string]any) string {
		res := runRequest(t, runs.Request{Spec: []byte(fmt.Sprintf(runsListSpec, name)), SpecFile: name + ".yaml",
			Params: params, TaskQueue: queue, ID: runs.NewID(name)}, 2*time.Minute)
		return res.ID
	}
	passed := start(a, nil)
	failed := start(a, map[string]any{"code": 3})
	rejected := start(b, map[string]any{"auc": 0.5})

	// Visibility lags the runs' ends a little.
	ctx := context.Background()
	var list []runs.RunInfo
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		list, err = runs.List(ctx, tclient, runs.ListOptions{Pipeline: a, Namespace: server.Namespace()})
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 2 && list[0].Status != runs.StatusRunning && list[1].Status != runs.StatusRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("runs of %s listed: %+v", a, list)
		}
		time.Sleep(200 * time.Millisecond)
	}
	byID := map[string]runs.RunInfo{}
	for _, r := range list {
		byID[r.ID] = r
	}
	today := time.Now().UTC().Format(time.DateOnly)
	for id, want := range map[string]struct {
		status runs.Status
		gate   string
	}{passed: {runs.StatusSucceeded, "passed"}, failed: {runs.StatusFailed, "cancelled"}} {
		r, ok := byID[id]
		if !ok {
			t.Fatalf("run %s not listed: %+v", id, list)
		}
		if r.Status != want.status || r.Gate != want.gate || r.Pipeline != a || r.EndedAt == nil || r.LogicalDate == "" {
			t.Errorf("run %s listed as %+v, want status %s, gate %s", id, r, want.status, want.gate)
		}
		// A run started without a logical date is for the day it started.
		if r.LogicalDate != today && r.LogicalDate != r.StartedAt.UTC().Format(time.DateOnly) {
			t.Errorf("run %s: logical date %s, want %s", id, r.LogicalDate, today)
		}
	}
	if list[0].ID != failed {
		t.Errorf("not newest first: %s before %s", list[0].ID, list[1].ID)
	}

	only, err := runs.List(ctx, tclient, runs.ListOptions{Pipeline: a, Status: runs.StatusFailed, Namespace: server.Namespace()})
	if err != nil {
		t.Fatal(err)
	}
	if len(only) != 1 || only[0].ID != failed {
		t.Errorf("--status failed listed %+v", only)
	}

	// The command: a table, and JSON.
	var ok bool
	var out string
	for deadline := time.Now().Add(30 * time.Second); !ok && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		out, err = retrainCLI(t, "runs", "list", "--pipeline", b)
		if err != nil {
			t.Fatal(err)
		}
		ok = strings.Contains(out, rejected) && strings.Contains(out, "succeeded") && strings.Contains(out, "rejected")
	}
	if !ok || strings.Contains(out, a) {
		t.Errorf("runs list --pipeline %s:\n%s", b, out)
	}
	t.Logf("retrain runs list --pipeline %s:\n%s", b, out)
	out, err = retrainCLI(t, "runs", "list", "--pipeline", a, "--status", "succeeded", "--since", "1h", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got []runs.RunInfo
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("runs list --json: %v\n%s", err, out)
	}
	if len(got) != 1 || got[0].ID != passed || got[0].Gate != "passed" {
		t.Errorf("runs list --pipeline %s --status succeeded --json: %s", a, out)
	}
	out, _ = retrainCLI(t, "runs", "list", "--pipeline", a)
	t.Logf("retrain runs list --pipeline %s:\n%s", a, out)

	// --logical-date: the run is for that day, whichever day it ran.
	file := filepath.Join(t.TempDir(), b+".yaml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf(runsListSpec, b)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := retrainCLI(t, "run", file, "--task-queue", queue, "--logical-date", "2026-10-05", "--wait"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		list, err := runs.List(ctx, tclient, runs.ListOptions{Pipeline: b, Namespace: server.Namespace()})
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 2 && list[0].LogicalDate == "2026-10-05" && list[0].Status == runs.StatusSucceeded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run with --logical-date 2026-10-05 listed as %+v", list)
		}
	}
	out, _ = retrainCLI(t, "runs", "list", "--pipeline", b)
	t.Logf("retrain runs list --pipeline %s:\n%s", b, out)
}

// TestStatusFollow follows a running run to its end through `retrain
// status --follow`: progress lines while it runs, the summary at the end,
// and exit status 2 for a failed run.
func TestStatusFollow(t *testing.T) {
	parallel(t)
	queue := newQueue(t)
	startWorker(t, queue)
	name := "follow-" + time.Now().Format("150405")
	run, err := runs.Start(context.Background(), tclient, runs.Request{Spec: []byte(fmt.Sprintf(runsListSpec, name)), SpecFile: name + ".yaml",
		Params: map[string]any{"sleep": 2}, TaskQueue: queue, ID: runs.NewID(name)})
	if err != nil {
		t.Fatal(err)
	}
	out, err := retrainCLI(t, "status", run.ID, "--follow")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("retrain status --follow:\n%s", out)
	for _, want := range []string{"check", "running", "pipeline " + name + ": succeeded", "gate"} {
		if !strings.Contains(out, want) {
			t.Errorf("status --follow printed no %q:\n%s", want, out)
		}
	}

	failing, err := runs.Start(context.Background(), tclient, runs.Request{Spec: []byte(fmt.Sprintf(runsListSpec, name)), SpecFile: name + ".yaml",
		Params: map[string]any{"sleep": 1, "code": 1}, TaskQueue: queue, ID: runs.NewID(name)})
	if err != nil {
		t.Fatal(err)
	}
	out, err = retrainCLI(t, "status", failing.ID, "-f")
	var exit *cli.ExitError
	if !errors.As(err, &exit) || exit.Code != 2 || !strings.Contains(out, "failed") {
		t.Errorf("status --follow of a failing run: %v\n%s", err, out)
	}
}
