package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/retrain-ml/retrain/internal/tracing"
	"github.com/retrain-ml/retrain/worker"
)

// NewWorkerRoot returns `retrain worker` as a program of its own, named use,
// with the global flags: the retrain-worker binary.
func NewWorkerRoot(app *App, use string) *cobra.Command {
	app.defaults()
	cmd := NewWorkerCommand(app)
	cmd.Use = use
	app.AddGlobalFlags(cmd)
	return cmd
}

// NewWorkerCommand returns `retrain worker`: poll Temporal and run pipelines.
func NewWorkerCommand(app *App) *cobra.Command {
	var (
		cfg  worker.Config
		otel tracing.Options
	)
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a worker: the Pipeline workflow and every step type",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			log := app.Logger()
			app.WorkerGPUs(&cfg)
			if err := worker.CheckGPU(cfg, log); err != nil {
				return err // before connecting: a GPU worker without a GPU must not start
			}
			stopTracing, err := app.StartTracing(ctx, otel, log)
			if err != nil {
				return err
			}
			defer stopTracing()
			c, err := app.Conn.Dial(ctx, log)
			if err != nil {
				return err
			}
			defer c.Close()
			if cfg.Host.Frontend == "" {
				cfg.Host.Frontend = app.Conn.Address // the default advertised address is the way there
			}
			w, err := worker.New(ctx, c, app.Conn.Namespace, cfg, log)
			if err != nil {
				return err
			}
			fmt.Fprintf(app.Err, "worker polling %s on %s (namespace %s)\n", cfg.TaskQueue, app.Conn.Address, app.Conn.Namespace)
			return w.Run(ctx)
		},
	}
	cfg.AddFlags(cmd.Flags())
	cfg.Lake.AddDataDirFlag(cmd.Flags())
	cfg.Store.AddDataDirFlag(cmd.Flags()) // shares the lake's --data-dir
	otel.AddFlags(cmd.Flags(), "retrain-worker")
	return cmd
}

// WorkerGPUs gives a worker's cfg the binary's GPU backend (app.GPUs). A
// binary without one leaves cfg.OpenGPUs nil, and --gpu fails with
// gpu.ErrNoNVML.
func (a *App) WorkerGPUs(cfg *worker.Config) {
	open := a.GPUs
	if open == nil {
		return
	}
	cfg.OpenGPUs = func() (worker.GPUHost, error) {
		h, err := open()
		if err != nil {
			return nil, err // a nil gpu.Host must stay a nil interface
		}
		return h, nil
	}
}
