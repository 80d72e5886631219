//go:build linux

package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Process helpers of the SIGKILL suite (killstack_test.go): build the
// retrain binary, run `retrain dev` as a child in a process group of its
// own, and kill it with everything it started. Linux only: the processes
// the stack started are found in /proc.

// devReadyLine is what `retrain dev` prints once its server, S3 server and
// worker are up.
const devReadyLine = "retrain dev stack is up"

// buildRetrain returns this tree's cmd/retrain, unless $RETRAIN_TEST_BIN
// names a binary built from this tree already.
func buildRetrain(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("RETRAIN_TEST_BIN"); bin != "" {
		return bin
	}
	return treeBinary(t, "./cmd/retrain")
}

// freePorts returns n distinct loopback ports nothing listens on now,
// below Linux's default ephemeral range (32768-60999): the stack binds
// them again after a restart, and a port in that range could meanwhile
// be handed to any socket bound to port 0, the restarting stack's own
// internal services included.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries == 1000 {
			t.Fatalf("no %d free ports in 20000-32767", n)
		}
		port := 20000 + rand.IntN(12768)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		// Held until all are picked, so none is picked twice.
		defer l.Close()
		ports = append(ports, port)
	}
	return ports
}

// runBinary runs bin with args and returns its standard output; the error
// carries its standard error.
func runBinary(bin string, limit time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%w: %s%s", err, errOut.String(), out.String())
	}
	return out.String(), nil
}

// devProc is a running `retrain dev`, leader of its own process group.
type devProc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once it has exited and been reaped
}

// startDevProc starts bin with args (a `retrain dev` command line), its
// output appended to logPath after a line naming the start, and returns
// once it says it is up (startDevIn, in the test's own folder). The
// process and everything it started are killed when the test ends.
func startDevProc(t *testing.T, logPath, bin string, args ...string) *devProc {
	t.Helper()
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(logFile, "--- %s retrain %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(args, " "))
	logFile.Close()
	return startDevIn(t, "", logPath, nil, bin, args...)
}

// killAll SIGKILLs the dev stack's process group and every process it
// started in a group of its own (the S3 server; command nodes), waits
// until all of them are gone and says how many there were (alive, torch_test.go). Killing one
// that is already gone is not an error.
func (p *devProc) killAll() (killed int, err error) {
	select {
	case <-p.done:
		return 0, nil
	default:
	}
	pid := p.cmd.Process.Pid
	// Found before the kill: once their parent is gone they belong to init.
	tree := descendants(pid)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	for _, d := range tree {
		_ = syscall.Kill(d, syscall.SIGKILL)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		return 0, fmt.Errorf("retrain dev (pid %d) still there 10 s after SIGKILL", pid)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, d := range tree {
		for alive(d) {
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("process %d of the dev stack still there 10 s after SIGKILL", d)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return 1 + len(tree), nil
}

// descendants returns the pids of pid's children, theirs and so on.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, err := parentOf(p); err == nil {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		for _, c := range children[queue[0]] {
			out = append(out, c)
			queue = append(queue, c)
		}
		queue = queue[1:]
	}
	return out
}

// parentOf reads a process's parent from /proc/PID/stat, whose second
// field (the command name, in parentheses) may hold anything.
func parentOf(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return 0, errors.New("malformed stat")
	}
	return strconv.Atoi(f[1])
}
