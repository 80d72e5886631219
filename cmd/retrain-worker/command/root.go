// Package command holds the retrain-worker command: `retrain worker`
// without the embedded Temporal server, Web UI and dev tooling.
// cmd/retrain-worker is its main; the integration tests run it from their
// own binary, which saves linking the program again.
package command

import (
	"github.com/spf13/cobra"

	"github.com/retrain-ml/retrain/gpu/nvmlhost"
	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/internal/version"
)

// NewRoot returns the worker command with --version.
func NewRoot() *cobra.Command {
	// GPU hosts run this binary: it is the one that always links NVML.
	root := cli.NewWorkerRoot(&cli.App{GPUs: nvmlhost.Opener()}, "retrain-worker")
	root.Version = version.Version
	root.SetVersionTemplate(version.Read().Text("retrain-worker"))
	return root
}
