// Command retrain-worker is the production worker: `retrain worker` without
// the embedded Temporal server, Web UI and dev tooling, so the binary stays
// small and pulls in none of the server's dependencies.
package main

import (
	"github.com/spf13/cobra"

	"github.com/retrain-ml/retrain/gpu/nvmlhost"
	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/internal/version"
)

func main() {
	cli.Execute(newRoot())
}

// newRoot returns the worker command with --version.
func newRoot() *cobra.Command {
	// GPU hosts run this binary: it is the one that always links NVML.
	root := cli.NewWorkerRoot(&cli.App{GPUs: nvmlhost.Opener()}, "retrain-worker")
	root.Version = version.Version
	root.SetVersionTemplate(version.Read().Text("retrain-worker"))
	return root
}
