package devstack

import (
	"context"
	dbsql "database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/worker"
)

// TestStartStopRestart covers the life cycle: start, a completed workflow,
// Stop (twice) releasing every port and the data dir, then a second Start on
// the same dir that still has the workflow.
func TestStartStopRestart(t *testing.T) {
	dir := t.TempDir()
	s := startStack(t, Options{DataDir: dir})
	if s.UIAddress() == "" {
		t.Fatal("UIAddress is empty with the UI enabled")
	}
	if got, want := s.DatabasePath(), filepath.Join(dir, "temporal.db"); got != want {
		t.Errorf("DatabasePath = %q, want %q", got, want)
	}
	c := dial(t, s)
	startWorker(t, c, worker.Options{})
	run, out := runWorkflow(t, c, "restart-me", sequenceWorkflow, 3)
	if out != 3 {
		t.Fatalf("workflow result = %d, want 3", out)
	}
	c.Close()

	frontend, ui := s.FrontendAddress(), strings.TrimPrefix(s.UIAddress(), "http://")
	begin := time.Now()
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	t.Logf("Stop took %v", time.Since(begin).Round(time.Millisecond))
	if d := time.Since(begin); d > 10*time.Second {
		t.Errorf("Stop took %v, want a few seconds", d)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	for _, addr := range []string{frontend, ui} {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("port %s still taken after Stop: %v", addr, err)
			continue
		}
		_ = l.Close()
	}

	s2 := startStack(t, Options{DataDir: dir, Headless: true})
	if s2.UIAddress() != "" {
		t.Errorf("UIAddress = %q with Headless", s2.UIAddress())
	}
	assertCompleted(t, dial(t, s2), run.GetID(), run.GetRunID(), 3)
}

// assertCompleted checks that the stored history ends with the workflow's
// completion carrying want.
func assertCompleted(t *testing.T, c client.Client, id, runID string, want int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	desc, err := c.DescribeWorkflowExecution(ctx, id, runID)
	if err != nil {
		t.Fatalf("describe %s: %v", id, err)
	}
	if st := desc.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatalf("workflow %s status = %v, want COMPLETED", id, st)
	}
	var completed, activities int
	it := c.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatalf("history of %s: %v", id, err)
		}
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			activities++
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
			completed++
			var got int
			if err := converter.GetDefaultDataConverter().FromPayloads(ev.GetWorkflowExecutionCompletedEventAttributes().GetResult(), &got); err != nil {
				t.Fatalf("decode result: %v", err)
			}
			if got != want {
				t.Errorf("stored result = %d, want %d", got, want)
			}
		}
	}
	if completed != 1 || activities != want {
		t.Errorf("history has %d completions and %d completed activities, want 1 and %d", completed, activities, want)
	}
}

// TestParallelStacks runs two stacks at once on different dirs, each with its
// own ports, and a workflow on each.
func TestParallelStacks(t *testing.T) {
	stacks := make([]*Server, 2)
	var wg sync.WaitGroup
	errs := make([]error, len(stacks))
	for i := range stacks {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			stacks[i], errs[i] = Start(ctx, Options{DataDir: t.TempDir(), Headless: true, Logger: testLogger(t)})
		})
	}
	wg.Wait()
	for i, s := range stacks {
		if errs[i] != nil {
			t.Fatalf("stack %d: %v", i, errs[i])
		}
		t.Cleanup(func() { _ = s.Stop() })
	}
	if stacks[0].FrontendAddress() == stacks[1].FrontendAddress() {
		t.Fatalf("both stacks on %s", stacks[0].FrontendAddress())
	}
	for i, s := range stacks {
		c := dial(t, s)
		startWorker(t, c, worker.Options{})
		if _, out := runWorkflow(t, c, fmt.Sprintf("parallel-%d", i), sequenceWorkflow, 2); out != 2 {
			t.Errorf("stack %d: result %d, want 2", i, out)
		}
	}
}

// TestDataDirLocked: a second stack on a dir in use fails clearly.
func TestDataDirLocked(t *testing.T) {
	dir := t.TempDir()
	startStack(t, Options{DataDir: dir, Headless: true})
	_, err := Start(context.Background(), Options{DataDir: dir, Headless: true, Logger: quietLogger()})
	if !errors.Is(err, errLocked) {
		t.Fatalf("second Start on a dir in use: err = %v, want %v", err, errLocked)
	}
	t.Logf("error: %v", err)
}

// TestUI: the Web UI serves its HTML and its settings allow starting
// workflows.
func TestUI(t *testing.T) {
	s := startStack(t, Options{DataDir: t.TempDir()})
	if !strings.HasPrefix(s.UIAddress(), "http://") {
		t.Fatalf("UIAddress = %q", s.UIAddress())
	}
	body := httpGet(t, s.UIAddress()+"/")
	if !strings.Contains(strings.ToLower(body), "<html") {
		t.Errorf("GET / is not HTML: %.200q", body)
	}
	// The UI reads its feature switches from /api/v1/settings.
	var settings struct {
		StartWorkflowDisabled *bool
		DefaultNamespace      string
		Auth                  struct{ Enabled bool }
	}
	if err := json.Unmarshal([]byte(httpGet(t, s.UIAddress()+"/api/v1/settings")), &settings); err != nil {
		t.Fatalf("settings: %v", err)
	}
	if settings.StartWorkflowDisabled == nil || *settings.StartWorkflowDisabled {
		t.Errorf("start-workflow form not enabled: StartWorkflowDisabled = %v", settings.StartWorkflowDisabled)
	}
	if settings.Auth.Enabled || settings.DefaultNamespace != "default" {
		t.Errorf("settings: auth %v, default namespace %q; want no auth and \"default\"", settings.Auth.Enabled, settings.DefaultNamespace)
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %.200s", url, resp.Status, b)
	}
	return string(b)
}

// TestNamespaceAndSearchAttributes: the namespace and search attributes exist
// after Start, and registration is idempotent across restarts, including a
// restart that asks for an additional attribute.
func TestNamespaceAndSearchAttributes(t *testing.T) {
	dir := t.TempDir()
	sas := map[string]enumspb.IndexedValueType{"RetrainPipeline": enumspb.INDEXED_VALUE_TYPE_KEYWORD}
	s := startStack(t, Options{DataDir: dir, Headless: true, Namespace: "retrain", SearchAttributes: sas})
	if s.Namespace() != "retrain" {
		t.Fatalf("Namespace = %q", s.Namespace())
	}
	c := dial(t, s)
	ctx := context.Background()
	ns, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: "retrain"})
	if err != nil {
		t.Fatalf("describe namespace: %v", err)
	}
	if got := ns.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration(); got != 7*24*time.Hour {
		t.Errorf("retention = %v, want 168h", got)
	}
	assertSearchAttributes(t, c, "retrain", sas)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}

	// Restart with one more attribute: the existing one is kept, the new one
	// is added through the operator API.
	sas["RetrainStep"] = enumspb.INDEXED_VALUE_TYPE_INT
	s = startStack(t, Options{DataDir: dir, Headless: true, Namespace: "retrain", SearchAttributes: sas})
	assertSearchAttributes(t, dial(t, s), "retrain", sas)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}

	// Same set again: nothing to do. A conflicting type is an error.
	s = startStack(t, Options{DataDir: dir, Headless: true, Namespace: "retrain", SearchAttributes: sas})
	assertSearchAttributes(t, dial(t, s), "retrain", sas)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	_, err = Start(ctx, Options{DataDir: dir, Headless: true, Namespace: "retrain", Logger: quietLogger(),
		SearchAttributes: map[string]enumspb.IndexedValueType{"RetrainStep": enumspb.INDEXED_VALUE_TYPE_KEYWORD}})
	if err == nil || !strings.Contains(err.Error(), "RetrainStep") {
		t.Errorf("Start with a conflicting search attribute type: err = %v", err)
	}
}

func assertSearchAttributes(t *testing.T, c client.Client, namespace string, want map[string]enumspb.IndexedValueType) {
	t.Helper()
	resp, err := c.OperatorService().ListSearchAttributes(context.Background(),
		&operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		t.Fatalf("list search attributes: %v", err)
	}
	for name, typ := range want {
		if got, ok := resp.GetCustomAttributes()[name]; !ok || got != typ {
			t.Errorf("search attribute %s = %v (present %v), want %v", name, got, ok, typ)
		}
	}
}

// TestSQLiteSettings: the server's own connection runs with the documented
// pragmas, the file is in WAL mode, and the check can fail.
func TestSQLiteSettings(t *testing.T) {
	s := startStack(t, Options{DataDir: t.TempDir(), Headless: true})
	cfg := sqliteConfig(s.DatabasePath())
	if err := checkPragmas(cfg, expectedPragmas); err != nil {
		t.Fatalf("server connection: %v", err)
	}
	// A wrong expectation must be reported, or the check proves nothing.
	err := checkPragmas(cfg, []struct{ name, want string }{{"synchronous", "2"}})
	if !errors.Is(err, errPragma) {
		t.Fatalf("check with synchronous=FULL expected: err = %v, want %v", err, errPragma)
	}

	// Independently, from a fresh connection: journal_mode is a property of
	// the file, synchronous of the connection (so it reflects the DSN).
	db, err := dbsql.Open("sqlite", dsn(s.DatabasePath(), cfg.ConnectAttributes))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	var mode string
	var sync int
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("PRAGMA synchronous").Scan(&sync); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" || sync != 1 {
		t.Errorf("journal_mode=%s synchronous=%d, want wal and 1 (NORMAL)", mode, sync)
	}
	if _, err := os.Stat(s.DatabasePath() + "-wal"); err != nil {
		t.Errorf("no WAL file next to the database: %v", err)
	}
}

// TestInvalidDataDir: unusable data dirs fail Start with an error that names
// the problem.
func TestInvalidDataDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		dir  string
		want string
	}{
		"empty":          {"", "DataDir is empty"},
		"under a file":   {filepath.Join(file, "data"), "create data dir"},
		"is a file":      {file, "create data dir"},
		"bad characters": {filepath.Join(t.TempDir(), "a?b"), "SQLite file URIs"},
	}
	if os.Geteuid() != 0 { // root writes anywhere
		ro := filepath.Join(t.TempDir(), "ro")
		if err := os.Mkdir(ro, 0o555); err != nil {
			t.Fatal(err)
		}
		cases["read-only"] = struct{ dir, want string }{ro, "not writable"}
	}
	notDB := t.TempDir()
	if err := os.WriteFile(filepath.Join(notDB, dbFileName), []byte("this is not a database, just text"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases["not a database"] = struct{ dir, want string }{notDB, "not a database"}

	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, err := Start(ctx, Options{DataDir: tc.dir, Headless: true, Logger: quietLogger()})
			if err == nil {
				_ = s.Stop()
				t.Fatalf("Start(%q) succeeded", tc.dir)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "devstack: ") {
				t.Errorf("Start(%q) error = %q, want it to mention %q", tc.dir, err, tc.want)
			}
			t.Logf("%v", err)
		})
	}
}
