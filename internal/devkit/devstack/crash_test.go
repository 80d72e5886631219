package devstack

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/worker"
)

// envCrashChild makes the test binary act as the child of TestCrashSurvival:
// run a stack on the dir it names, complete a workflow, report, and wait to
// be killed.
const envCrashChild = "DEVSTACK_CRASH_CHILD_DIR"

const crashReadyPrefix = "DEVSTACK_CHILD_READY "

// TestCrashSurvival proves the durability claim of the package doc: a
// workflow acknowledged as completed survives SIGKILL of the process running
// the stack (no Stop, no checkpoint, no close of the SQLite file).
func TestCrashSurvival(t *testing.T) {
	if dir := os.Getenv(envCrashChild); dir != "" {
		crashChild(t, dir)
		return
	}
	dir := t.TempDir()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCrashSurvival$", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), envCrashChild+"="+dir)
	cmd.Stderr = tWriter{t}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Whatever happens below, the child is gone before the test returns (its
	// stderr is copied into the test log until then).
	killed := false
	defer func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	var id, runID string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), crashReadyPrefix); ok {
			if _, err := fmt.Sscan(rest, &id, &runID); err != nil {
				t.Fatalf("child report %q: %v", rest, err)
			}
			break
		}
		t.Logf("child: %s", sc.Text())
	}
	if id == "" {
		t.Fatalf("child exited without completing its workflow (scan error: %v)", sc.Err())
	}

	// SIGKILL: no deferred code, no Stop, no SQLite close in the child.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed = true
	t.Logf("killed child %d after workflow %s/%s completed", cmd.Process.Pid, id, runID)
	if fi, err := os.Stat(dir + "/" + dbFileName + "-wal"); err == nil {
		// The completion lives in the WAL, not yet in the main file: the
		// restart below recovers it from there.
		t.Logf("WAL left by the killed child: %d bytes", fi.Size())
	}

	s := startStack(t, Options{DataDir: dir, Headless: true})
	assertCompleted(t, dial(t, s), id, runID, 5)
}

func crashChild(t *testing.T, dir string) {
	s := startStack(t, Options{DataDir: dir, Headless: true})
	c := dial(t, s)
	startWorker(t, c, worker.Options{})
	run, _ := runWorkflow(t, c, "crash-me", sequenceWorkflow, 5)
	// Printed only after the result was acknowledged to the client.
	fmt.Printf("%s%s %s\n", crashReadyPrefix, run.GetID(), run.GetRunID())
	select {} // wait for SIGKILL (or -test.timeout should the parent die)
}
