// Command retrain runs ML retrain -> validate -> deploy pipelines as DAGs on
// Temporal. This binary carries the embedded dev stack (`retrain dev`,
// `retrain demo`, `retrain bench`); production workers use retrain-worker.
package main

import (
	"github.com/spf13/cobra"

	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/internal/devkit/devstack/s3server"
	"github.com/retrain-ml/retrain/internal/version"
)

func main() {
	s3server.Main() // the dev stack's S3 server runs as this program started again
	cli.Execute(newRoot())
}

// newRoot returns the retrain command with the dev stack's commands and
// --version.
func newRoot() *cobra.Command {
	app := &cli.App{GPUs: gpuOpener()}
	root := cli.NewRoot(app, "retrain")
	root.AddCommand(newDevCommand(app), newDemoCommand(app), newBenchCommand(app))
	root.Version = version.Version
	root.SetVersionTemplate(version.Read().Text("retrain"))
	return root
}
