package command

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/devkit/devstack"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/worker"
)

func newDemoCommand(app *cli.App) *cobra.Command {
	var (
		dataDir  string
		pipeline string
		keep     bool
		data     = demodata.Config{Rows: 30000, Days: 4, Seed: 1}
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the example pipeline end to end on a fresh embedded stack and print a per-node summary",
		Long: `Starts the embedded stack (Temporal, S3, the lake) in a fresh directory and runs
an example pipeline. By default that is ctr-retrain, three times on demo data:
a first run that deploys model ctr v1, a second one on the same data compared
against v1, and one whose feature ad_quality is deliberately broken, which the
gate rejects while the training table and production stay as they were. Each
run's HTML report is written under DATA/reports/ (kept when the data directory
is temporary). --pipeline hello runs the fan-out/join example instead.`,
		Args: cobra.NoArgs,
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
					// The reports outlive the demo; the stack's state does not.
					defer removeAllBut(dir, "reports")
				}
			}
			s, err := startLocal(ctx, app, devstack.Options{DataDir: dataDir, Headless: true}, 0, worker.Config{AllowInlineSpecs: true}, log)
			if err != nil {
				return err
			}
			defer s.close()

			if pipeline == retrainDemoPipeline {
				fmt.Fprintf(app.Err, "demo data: %d rows over %d days; state in %s\n", data.Rows, data.Days, dataDir)
				return runRetrainDemo(ctx, s, dataDir, data, app.Out, app.Err, log)
			}
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
	cmd.Flags().StringVar(&pipeline, "pipeline", retrainDemoPipeline, "example pipeline to run (ctr-retrain: the three-run retrain demo)")
	cmd.Flags().Int64Var(&data.Rows, "rows", data.Rows, "ctr-retrain: demo training rows")
	cmd.Flags().IntVar(&data.Days, "days", data.Days, "ctr-retrain: demo days (the last one is held out)")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the temporary data directory")
	return cmd
}

// removeAllBut empties dir except for the entry named keep, and removes
// dir too when nothing is kept.
func removeAllBut(dir, keep string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	kept := false
	for _, e := range entries {
		if e.Name() == keep {
			kept = true
			continue
		}
		os.RemoveAll(filepath.Join(dir, e.Name()))
	}
	if !kept {
		os.Remove(dir)
	}
}
