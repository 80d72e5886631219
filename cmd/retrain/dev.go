package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/retrain-ml/retrain/devstack"
	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/storage"
	"github.com/retrain-ml/retrain/worker"
)

func newDevCommand(app *cli.App) *cobra.Command {
	var (
		opts   devstack.Options
		cfg    worker.Config
		s3Port int
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Start the local stack: Temporal server (SQLite), Web UI and a worker, in one process",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			log := app.Logger()
			s, err := startLocal(ctx, app, opts, s3Port, cfg, log)
			if err != nil {
				return err
			}
			defer s.close()
			out := app.Out
			fmt.Fprintln(out, "retrain dev stack is up")
			fmt.Fprintf(out, "  Temporal:  %s (namespace %s)\n", s.server.FrontendAddress(), s.server.Namespace())
			if ui := s.server.UIAddress(); ui != "" {
				fmt.Fprintf(out, "  Web UI:    %s\n", ui)
			}
			if s.s3 != nil {
				fmt.Fprintf(out, "  S3:        %s (bucket %s; objects are files under %s, credentials in %s)\n",
					s.s3.Endpoint(), s.s3.Bucket(), s.s3.Root(), storage.DevConnectionPath(opts.DataDir))
			} else {
				fmt.Fprintf(out, "  S3:        %s (--s3-uri)\n", cfg.Store.S3.URI)
			}
			fmt.Fprintf(out, "  Data:      %s\n", opts.DataDir)
			fmt.Fprintf(out, "  Worker:    task queue %s\n", cfg.TaskQueue)
			fmt.Fprintln(out, "Start a run:")
			fmt.Fprintf(out, "  retrain run dags/examples/hello.yaml --wait --address %s\n", s.server.FrontendAddress())
			fmt.Fprintf(out, "  or in the Web UI: Start Workflow, type %q, task queue %q, input {\"pipeline\": \"hello\"}\n", "Pipeline", cfg.TaskQueue)
			fmt.Fprintln(out, "Ctrl-C stops the stack; its state stays in the data dir.")
			<-ctx.Done()
			fmt.Fprintln(out, "stopping")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.DataDir, "data-dir", ".retrain", "where the stack keeps its state")
	f.BoolVar(&opts.Headless, "headless", false, "do not serve the Web UI")
	f.IntVar(&opts.Port, "port", 7233, "Temporal frontend gRPC port")
	f.IntVar(&opts.UIPort, "ui-port", 8233, "Web UI port")
	f.IntVar(&s3Port, "s3-port", 7070, "S3 server port (checkpoints and models; 0 picks a free one)")
	cfg.AddFlags(f)
	return cmd
}
