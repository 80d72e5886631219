package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/dags/examples"
	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/worker"
)

// startLoggedWorker starts an in-process worker on a queue of its own that
// accepts inline specs and logs at debug level to a file; stop it (stop is
// idempotent, and also runs at the test's end) before reading the log.
func startLoggedWorker(t *testing.T) (queue, logPath string, stop func()) {
	t.Helper()
	queue = newQueue(t)
	logPath = filepath.Join(t.TempDir(), "worker.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelDebug}))
	w, err := worker.New(context.Background(), tclient, server.Namespace(),
		worker.Config{TaskQueue: queue, Pipelines: examples.FS, AllowInlineSpecs: true}, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			w.Stop()
			logFile.Sync()
			logFile.Close()
		})
	}
	t.Cleanup(stop)
	return queue, logPath, stop
}

// databaseFilesWith returns the server's database files (the database,
// its -wal and -shm) once marker has reached one of them: the history is
// written there a moment after a run ends, and the marker's presence
// proves a grep of those files looks in the right place.
func databaseFilesWith(t *testing.T, marker string) []string {
	t.Helper()
	dbFiles, _ := filepath.Glob(server.DatabasePath() + "*")
	if len(dbFiles) == 0 {
		t.Fatalf("no database files at %s", server.DatabasePath())
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		for _, f := range dbFiles {
			if b, err := os.ReadFile(f); err == nil && bytes.Contains(b, []byte(marker)) {
				return dbFiles
			}
		}
	}
	t.Errorf("the marker is in none of %v: the grep would prove nothing", dbFiles)
	return dbFiles
}

func randomValue(t *testing.T, prefix string) string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return prefix + hex.EncodeToString(b)
}

// TestPlantedSecretLeavesNoTrace: a secret planted on the worker
// (RETRAIN_SECRET_IT_TOKEN) reaches the command through ${secret.IT_TOKEN},
// and the command prints it, dumps its environment and writes it to its
// outputs file; the worker's AWS key is not in its environment at all.
// Neither value is then anywhere in the Temporal server's database files,
// the worker's log or the run's HTML report, while a marker the command
// prints next to them is (so the greps do look where the outputs went).
func TestPlantedSecretLeavesNoTrace(t *testing.T) {
	secret, awsKey, marker := randomValue(t, "sec-"), randomValue(t, "aws-"), randomValue(t, "marker-")
	t.Setenv("RETRAIN_SECRET_IT_TOKEN", secret)
	t.Setenv("AWS_SECRET_ACCESS_KEY", awsKey)

	queue, logPath, stopWorker := startLoggedWorker(t)

	res := runSpec(t, queue, `
name: secrets
nodes:
  - id: leak
    type: command
    with:
      argv: ["sh", "-c", "echo \"`+marker+` token=$TOKEN auth=$AUTH\"; env; echo \"token=$TOKEN\" >&2; printf '{\"t\": \"%s\", \"m\": \"`+marker+`\"}' \"$TOKEN\" > \"$RETRAIN_OUTPUTS\""]
      env: {TOKEN: "${secret.IT_TOKEN}", AUTH: "Bearer ${secret.IT_TOKEN}"}
  - id: aws
    type: command
    needs: [leak]
    with: {argv: ["sh", "-c", "echo \"aws=$AWS_SECRET_ACCESS_KEY\""]}
`, nil)
	wantStatus(t, res, runs.StatusSucceeded)
	leak := node(t, res, "leak")
	if got := leak.Outputs["t"]; got != "***" {
		t.Errorf("leak outputs t = %v, want ***", got)
	}
	if out, _ := leak.Outputs["stdout"].(string); !strings.Contains(out, marker+" token=*** auth=Bearer ***") || !strings.Contains(out, "TOKEN=***") {
		t.Errorf("leak stdout %q", out)
	}
	if got := node(t, res, "aws").Outputs["stdout"]; got != "aws=" {
		t.Errorf("aws stdout = %q: the worker's AWS key reached the command", got)
	}

	reportPath := filepath.Join(t.TempDir(), "report.html")
	if err := cli.WriteRunReport(context.Background(), tclient, nil, res, reportPath, cli.ReportLinks{}); err != nil {
		t.Fatal(err)
	}
	stopWorker() // the log is complete

	files := append([]string{logPath, reportPath}, databaseFilesWith(t, marker)...)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for name, v := range map[string]string{"the planted secret": secret, "the worker's AWS key": awsKey} {
			if n := bytes.Count(b, []byte(v)); n > 0 {
				t.Errorf("%s: %d occurrences of %s", f, n, name)
			}
		}
		t.Logf("%s (%d bytes): neither value found; marker found: %v", filepath.Base(f), len(b), bytes.Contains(b, []byte(marker)))
	}
}

// TestMissingSecretFailsNode: a secret the worker does not have fails
// the node at once (bad input, not retried), naming the secret.
func TestMissingSecretFailsNode(t *testing.T) {
	queue := newQueue(t)
	startWorker(t, queue)
	res := runSpec(t, queue, `
name: nosecret
nodes:
  - id: n
    type: command
    with: {argv: ["true"], env: {K: "${secret.IT_NOT_SET}"}}
`, nil)
	wantStatus(t, res, runs.StatusFailed)
	n := node(t, res, "n")
	if n.Attempts != 1 || !strings.Contains(n.Error, "IT_NOT_SET") {
		t.Errorf("n: %s attempts %d: %s", n.Status, n.Attempts, n.Error)
	}
}
