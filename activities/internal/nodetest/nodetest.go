// Package nodetest helps the node packages' tests: a quiet logger, and
// running a node in a child process that the test kills midway (to prove a
// crashed attempt leaves nothing half-written).
package nodetest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"testing"

	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/nodetype"
)

// Quiet is a logger that drops everything.
var Quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// The child process learns its step, store and input from these.
const (
	childEnv      = "NODETEST_CHILD"
	childStoreEnv = "NODETEST_STORE"
	childInputEnv = "NODETEST_INPUT"
)

// ChildStep runs one node in a child process, against the store it opened.
type ChildStep func(ctx context.Context, st *s3store.Store, in nodetype.Input) (map[string]any, error)

// Main is a node package's TestMain: in a child started by StartChild it
// runs the named step and nothing else; otherwise it runs the tests.
func Main(m *testing.M, steps map[string]ChildStep) {
	if step := os.Getenv(childEnv); step != "" {
		os.Exit(runChild(step, steps))
	}
	os.Exit(m.Run())
}

// runChild runs one node in this process and returns only if it was not
// killed on the way.
func runChild(step string, steps map[string]ChildStep) int {
	var cfg s3store.Config
	var in nodetype.Input
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
	run, ok := steps[step]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown child step %q\n", step)
		return 2
	}
	out, err := run(ctx, st, in)
	fmt.Fprintf(os.Stderr, "child step %s was not killed: outputs %v, error %v\n", step, out, err)
	return 3
}

// StartChild starts a node in a child process (see Main).
func StartChild(t *testing.T, step string, srv *s3test.Server, prefix string, in nodetype.Input) *exec.Cmd {
	t.Helper()
	cfg, err := json.Marshal(srv.Config(prefix))
	if err != nil {
		t.Fatalf("store config for the child: %v", err)
	}
	input, err := json.Marshal(in)
	if err != nil {
		t.Fatalf("input for the child: %v", err)
	}
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
