package integration

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/dags/examples"
	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/worker"
	"github.com/retrain-ml/retrain/workflows"
)

// lockedLog is a worker's log that the test reads while it writes.
type lockedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// waitLog waits until log has a line holding every one of want, and
// returns that line.
func waitLog(t *testing.T, log *lockedLog, who string, want ...string) string {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
	lines:
		for _, line := range strings.Split(log.String(), "\n") {
			for _, w := range want {
				if !strings.Contains(line, w) {
					continue lines
				}
			}
			return line
		}
	}
	t.Fatalf("%s's log has no line with %q within 30s:\n%s", who, want, log)
	return ""
}

// TestWorkersDisagreeOnPolicy: a dev-style worker (inline specs, a report
// URL) and a newcomer on its queue started without either, as a second
// host's retrain-worker often is. Each warns in its log of the other,
// naming it and the fields that differ; a run whose workflow task the
// newcomer takes fails saying which worker refused the inline spec and
// which accept it, and the runs the dev worker took succeed.
func TestWorkersDisagreeOnPolicy(t *testing.T) {
	parallel(t)
	queue := newQueue(t)
	start := func(host string, allowInline bool, reportURL string) (*lockedLog, string) {
		log := &lockedLog{}
		cfg := worker.Config{
			TaskQueue: queue, Pipelines: examples.FS, AllowInlineSpecs: allowInline, ReportURL: reportURL,
			Host: worker.HostConfig{ID: host}, PeerScanInterval: 500 * time.Millisecond,
		}
		w, err := worker.New(context.Background(), tclient, server.Namespace(), cfg, slog.New(slog.NewTextHandler(log, nil)))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		return log, fmt.Sprintf("%d@%s@retrain", os.Getpid(), host)
	}
	devLog, dev := start("devbox", true, "http://127.0.0.1:8234/runs/{run}")
	hostBLog, hostB := start("hostB", false, "")

	warning := "another worker on this task queue runs under a different policy"
	seenByB := waitLog(t, hostBLog, "hostB", "level=WARN", warning, "worker="+dev,
		"allow_inline_specs (--allow-inline-specs: off here, on there)", "report_url (--report-url: unset here, set (digest ")
	seenByDev := waitLog(t, devLog, "dev worker", "level=WARN", warning, "worker="+hostB,
		"allow_inline_specs (--allow-inline-specs: on here, off there)", "report_url (--report-url: set (digest ")
	t.Logf("hostB's log: %s", seenByB)
	t.Logf("dev worker's log: %s", seenByDev)
	for _, line := range []string{seenByB, seenByDev} {
		if strings.Contains(line, "127.0.0.1:8234") {
			t.Errorf("a warning holds the report URL: %s", line)
		}
		for _, same := range []string{"allow_commands", "pipelines", "object_store", "lake", "version"} {
			if strings.Contains(line, same+" (") {
				t.Errorf("a warning names %s, which both workers share: %s", same, line)
			}
		}
	}

	// `retrain workers` lists both, and marks the one that differs from
	// the first listed (a tie: the earliest name, devbox).
	var out, errOut bytes.Buffer
	root := cli.NewRoot(&cli.App{Out: &out, Err: &errOut, LogLevel: "warn"}, "retrain")
	root.SetArgs([]string{"workers", "--task-queue", queue, "--address", server.FrontendAddress(), "--namespace", server.Namespace()})
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("retrain workers: %v\n%s", err, errOut.String())
	}
	t.Logf("retrain workers:\n%s%s", out.String(), errOut.String())
	if !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(dev)+` +[0-9a-f]{16} +\d+s ago *$`).MatchString(out.String()) ||
		!regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(hostB)+` +[0-9a-f]{16} +\d+s ago +allow_inline_specs, report_url$`).MatchString(out.String()) ||
		!strings.Contains(errOut.String(), "warning: 1 of 2 workers on task queue") {
		t.Errorf("retrain workers said:\n%s%s", out.String(), errOut.String())
	}

	// Runs go to whichever worker polls first: run until hostB has taken
	// one (each run is about even odds).
	succeeded := 0
	for i := 0; i < 24; i++ {
		res := runSpec(t, queue, policySpec, nil)
		if res.Status == runs.StatusSucceeded {
			succeeded++
			continue
		}
		wantStatus(t, res, runs.StatusFailed)
		for _, want := range []string{
			"worker " + hostB + " refused the inline spec: " + workflows.InlineSpecsRefused,
			fmt.Sprintf("it runs without --allow-inline-specs while other workers on task queue %q accept them (%s, last polled", queue, dev),
			"workers on one queue must share one policy",
		} {
			if !strings.Contains(res.Error, want) {
				t.Errorf("failed run's error lacks %q:\n%s", want, res.Error)
			}
		}
		t.Logf("run %s (after %d the dev worker took) failed: %s", res.ID, succeeded, res.Error)
		return
	}
	t.Fatalf("hostB took none of 24 runs' workflow tasks (%d succeeded)", succeeded)
}

// TestWorkersDisagreeOnCommands: where one worker of a queue allows a
// program and another does not, a node the stricter one refuses says
// which worker refused it and which allow it.
func TestWorkersDisagreeOnCommands(t *testing.T) {
	parallel(t)
	queue := newQueue(t)
	start := func(host string, allow ...string) (*lockedLog, string) {
		log := &lockedLog{}
		cfg := worker.Config{
			TaskQueue: queue, Pipelines: examples.FS, AllowInlineSpecs: true, AllowCommands: allow,
			Host: worker.HostConfig{ID: host}, PeerScanInterval: 500 * time.Millisecond,
		}
		w, err := worker.New(context.Background(), tclient, server.Namespace(), cfg, slog.New(slog.NewTextHandler(log, nil)))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		return log, fmt.Sprintf("%d@%s@retrain", os.Getpid(), host)
	}
	_, loose := start("loose", "sh", "cat")
	strictLog, strict := start("strict", "sh")
	waitLog(t, strictLog, "strict", "level=WARN", "worker="+loose, "allow_commands (--allow-commands: set (digest ")

	const spec = `name: commands-disagree
nodes:
  - {id: read, type: command, with: {argv: [cat, /etc/hostname]}}
`
	succeeded := 0
	for i := 0; i < 24; i++ {
		res := runSpec(t, queue, spec, nil)
		if res.Status == runs.StatusSucceeded {
			succeeded++
			continue
		}
		wantStatus(t, res, runs.StatusFailed)
		msg := node(t, res, "read").Error
		for _, want := range []string{
			"worker " + strict + ` refused: program "cat" is not allowed on this worker`,
			fmt.Sprintf("other workers on task queue %q run with another allow_commands (%s, last polled", queue, loose),
		} {
			if !strings.Contains(msg, want) {
				t.Errorf("failed node's error lacks %q:\n%s", want, msg)
			}
		}
		t.Logf("run %s (after %d the loose worker ran) failed: %s", res.ID, succeeded, msg)
		return
	}
	t.Fatalf("the strict worker took none of 24 runs' nodes (%d succeeded)", succeeded)
}
