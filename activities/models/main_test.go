package models

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/nodetype"
)

var quiet = nodetest.Quiet

// TestMain runs deploy in a child process that kills itself between
// registering the version and moving the alias.
func TestMain(m *testing.M) {
	nodetest.Main(m, map[string]nodetest.ChildStep{
		"deploy-crash-after-register": func(ctx context.Context, st *s3store.Store, in nodetype.Input) (map[string]any, error) {
			m := &Models{Store: st, Logger: quiet, afterRegister: func() {
				// The version is complete; the alias has not moved.
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}}
			return m.deployType().Run(ctx, in)
		},
	})
}

func startChild(t *testing.T, step string, srv *s3test.Server, prefix string, in nodetype.Input) *exec.Cmd {
	return nodetest.StartChild(t, step, srv, prefix, in)
}
