package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/internal/s3test"
)

// The tests that kill a step midway run it in this test binary started
// again: TestMain then runs the step named by childEnv and nothing else.
const (
	childEnv      = "ACTIVITIES_TEST_CHILD"
	childStoreEnv = "ACTIVITIES_TEST_STORE"
	childInputEnv = "ACTIVITIES_TEST_INPUT"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestMain(m *testing.M) {
	if step := os.Getenv(childEnv); step != "" {
		os.Exit(runChild(step))
	}
	os.Exit(m.Run())
}

// runChild runs one node in this process and returns only if it was not
// killed on the way.
func runChild(step string) int {
	var cfg s3store.Config
	var in NodeInput
	if err := json.Unmarshal([]byte(os.Getenv(childStoreEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := json.Unmarshal([]byte(os.Getenv(childInputEnv)), &in); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := context.Background()
	st, err := s3store.Open(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var out map[string]any
	switch step {
	case "deploy-crash-after-register":
		m := &Models{Store: st, Logger: quiet, afterRegister: func() {
			// The version is complete; the alias has not moved.
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}}
		out, err = m.Deploy(ctx, in)
	case "checkpoint":
		c := &Checkpoints{Store: st, Logger: quiet}
		out, err = c.Run(ctx, in)
	default:
		err = fmt.Errorf("unknown child step %q", step)
	}
	fmt.Fprintf(os.Stderr, "child step %s was not killed: outputs %v, error %v\n", step, out, err)
	return 3
}

// startChild starts a node in a child process (see runChild).
func startChild(t *testing.T, step string, srv *s3test.Server, prefix string, in NodeInput) *exec.Cmd {
	t.Helper()
	cfg, _ := json.Marshal(srv.Config(prefix))
	input, _ := json.Marshal(in)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+step, childStoreEnv+"="+string(cfg), childInputEnv+"="+string(input))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd
}
