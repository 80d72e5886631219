// Package command holds the retrain command: the CLI every user runs, with
// the embedded dev stack's commands (`retrain dev`, `retrain demo`,
// `retrain bench`). cmd/retrain is its main; the integration tests run it
// from their own binary, which saves linking this large program again.
package command

import (
	"github.com/spf13/cobra"

	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/internal/version"
)

// NewRoot returns the retrain command with the dev stack's commands and
// --version.
func NewRoot() *cobra.Command {
	app := &cli.App{GPUs: gpuOpener()}
	root := cli.NewRoot(app, "retrain")
	root.AddCommand(newDevCommand(app), newDemoCommand(app), newBenchCommand(app), cli.NewTestCommand(app))
	root.Version = version.Version
	root.SetVersionTemplate(version.Read().Text("retrain"))
	return root
}
