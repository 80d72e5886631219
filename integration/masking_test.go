package integration

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/dags/examples"
	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/worker"
)

// TestMultiLineSecretMaskedEverywhere (issue 17, weakness 4): a
// multi-line secret that a step prints raw (logged line by line),
// JSON-escaped and Python-quoted, writes to its outputs in both forms and
// quotes in the stderr its failure message carries, is in none of the
// server's database files, the worker's log or the run's report, while a
// marker printed next to it is.
func TestMultiLineSecretMaskedEverywhere(t *testing.T) {
	line1, line2, marker := randomValue(t, "l1-"), randomValue(t, "l2-"), randomValue(t, "marker-")
	t.Setenv("RETRAIN_SECRET_IT_MULTI", line1+"\n"+line2+"\n}")

	queue := newQueue(t)
	logPath := filepath.Join(t.TempDir(), "worker.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	log := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelDebug}))
	w, err := worker.New(context.Background(), tclient, server.Namespace(),
		worker.Config{TaskQueue: queue, Pipelines: examples.FS, AllowInlineSpecs: true}, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			w.Stop()
		}
	}()

	res := runSpec(t, queue, `
name: multisecret
nodes:
  - id: show
    type: command
    with:
      env: {TOKEN: "${secret.IT_MULTI}"}
      argv:
        - python3
        - -c
        - |
          import json, os
          t = os.environ["TOKEN"]
          print("`+marker+`")
          print(t)
          print(json.dumps({"t": t}), repr(t))
          open(os.environ["RETRAIN_OUTPUTS"], "w").write(json.dumps({"t": t, "q": repr(t), "m": "`+marker+`"}))
  - id: fail
    type: command
    needs: [show]
    retry: {max_attempts: 1}
    with:
      env: {TOKEN: "${secret.IT_MULTI}"}
      argv:
        - python3
        - -c
        - |
          import json, os, sys
          print("bad token", repr(os.environ["TOKEN"]), json.dumps(os.environ["TOKEN"]), file=sys.stderr)
          sys.exit(3)
`, nil)
	wantStatus(t, res, runs.StatusFailed)
	if q := node(t, res, "show").Outputs["q"]; q != "'***'" {
		t.Errorf("show outputs q = %v, want '***'", q)
	}
	if e := node(t, res, "fail").Error; !strings.Contains(e, "bad token '***' \"***\"") {
		t.Errorf("fail error %q", e)
	}

	reportPath := filepath.Join(t.TempDir(), "report.html")
	if err := cli.WriteRunReport(context.Background(), tclient, nil, res, reportPath, cli.ReportLinks{}); err != nil {
		t.Fatal(err)
	}
	w.Stop()
	stopped = true
	logFile.Sync()

	dbFiles, _ := filepath.Glob(server.DatabasePath() + "*")
	if len(dbFiles) == 0 {
		t.Fatalf("no database files at %s", server.DatabasePath())
	}
	var dbHasMarker bool
	for deadline := time.Now().Add(30 * time.Second); !dbHasMarker && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		for _, f := range dbFiles {
			if b, err := os.ReadFile(f); err == nil && bytes.Contains(b, []byte(marker)) {
				dbHasMarker = true
			}
		}
	}
	if !dbHasMarker {
		t.Errorf("the marker is in none of %v: the grep would prove nothing", dbFiles)
	}
	for _, f := range append([]string{logPath, reportPath}, dbFiles...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// Each line is random hex: every escaped form holds it as it is.
		for _, v := range []string{line1, line2} {
			if n := bytes.Count(b, []byte(v)); n > 0 {
				t.Errorf("%s: %d occurrences of a line of the secret", f, n)
			}
		}
	}
	if b, _ := os.ReadFile(logPath); !bytes.Contains(b, []byte(marker)) {
		t.Errorf("the worker log has no marker: the grep would prove nothing")
	}
}
