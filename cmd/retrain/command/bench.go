package command

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/internal/devkit/bench"
	"github.com/retrain-ml/retrain/internal/devkit/devstack"
	"github.com/retrain-ml/retrain/worker"
)

func newBenchCommand(app *cli.App) *cobra.Command {
	var cfg bench.Config
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the interpreter against plain SDK workflows on a fresh embedded stack",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			dir, err := os.MkdirTemp("", "retrain-bench-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			log := app.Logger()
			s, err := startLocal(ctx, app, devstack.Options{DataDir: dir, Headless: true}, 0, worker.Config{AllowInlineSpecs: true}, log)
			if err != nil {
				return err
			}
			defer s.close()
			plain := sdkworker.New(s.client, bench.PlainQueue, sdkworker.Options{})
			bench.RegisterPlain(plain)
			if err := plain.Start(); err != nil {
				return err
			}
			defer plain.Stop()
			fmt.Fprintf(app.Err, "measuring: chain of %d and fan-out of %d, %d rounds each...\n", cfg.Chain, cfg.FanOut, cfg.Rounds)
			rep, err := bench.Run(ctx, s.client, cfg)
			if err != nil {
				return err
			}
			rep.Print(app.Out)
			return nil
		},
	}
	cmd.Flags().IntVar(&cfg.Chain, "chain", 100, "nodes in the sequential chain")
	cmd.Flags().IntVar(&cfg.FanOut, "fanout", 1000, "nodes in the fan-out")
	cmd.Flags().IntVar(&cfg.Rounds, "rounds", 3, "measured rounds per shape (median reported)")
	return cmd
}
