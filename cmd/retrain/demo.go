package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/retrain-ml/retrain/devstack"
	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/worker"
)

func newDemoCommand(app *cli.App) *cobra.Command {
	var (
		dataDir  string
		pipeline string
		keep     bool
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the example pipeline end to end on a fresh embedded stack and print a per-node summary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if !cmd.Flags().Changed("log-level") {
				app.LogLevel = "warn" // the demo's output is its summary; --log-level info shows node output
			}
			log := app.Logger()
			if dataDir == "" {
				dir, err := os.MkdirTemp("", "retrain-demo-")
				if err != nil {
					return err
				}
				dataDir = dir
				if !keep {
					defer os.RemoveAll(dir)
				}
			}
			s, err := startLocal(ctx, app, devstack.Options{DataDir: dataDir, Headless: true}, 0, worker.Config{}, log)
			if err != nil {
				return err
			}
			defer s.close()

			run, err := runs.Start(ctx, s.client, runs.Request{Pipeline: pipeline})
			if err != nil {
				return err
			}
			fmt.Fprintf(app.Err, "running pipeline %s as %s (data in %s)\n", pipeline, run.ID, dataDir)
			res, err := runs.Wait(ctx, s.client, run.ID, cli.NewProgress(app.Err).Update)
			if err != nil {
				return err
			}
			cli.PrintSummary(app.Out, res)
			if res.Status != "succeeded" {
				return &cli.ExitError{Code: 2, Err: fmt.Errorf("demo run %s: %s", res.Status, res.Error)}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "keep the stack's state here (default: a temporary directory, removed afterwards)")
	cmd.Flags().StringVar(&pipeline, "pipeline", "hello", "example pipeline to run")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the temporary data directory")
	return cmd
}
