package checkpoint

import (
	"context"
	"os/exec"
	"testing"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/nodetype"
)

var quiet = nodetest.Quiet

// TestMain runs the checkpoint node in a child process for the tests that
// kill it midway.
func TestMain(m *testing.M) {
	nodetest.Main(m, map[string]nodetest.ChildStep{
		"checkpoint": func(ctx context.Context, st *s3store.Store, in nodetype.Input) (map[string]any, error) {
			return Type(st, quiet).Run(ctx, in)
		},
	})
}

func startChild(t *testing.T, step string, srv *s3test.Server, prefix string, in nodetype.Input) *exec.Cmd {
	return nodetest.StartChild(t, step, srv, prefix, in)
}
