package command

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/dags/examples"
	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/internal/devkit/devstack"
	"github.com/retrain-ml/retrain/internal/storage"
	"github.com/retrain-ml/retrain/internal/tracing"
	"github.com/retrain-ml/retrain/worker"
)

func newDevCommand(app *cli.App) *cobra.Command {
	var (
		opts       devstack.Options
		cfg        worker.Config
		s3Port     int
		reportPort int
		otel       tracing.Options
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Start the local stack: Temporal server (SQLite), Web UI and a worker, in one process",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			log := app.Logger()
			app.WorkerGPUs(&cfg)
			if err := worker.CheckGPU(cfg, log); err != nil {
				return err // before starting anything: --gpu without a usable GPU
			}
			// The report server's port is taken first: the worker puts its
			// URL in every run's details in the Web UI.
			reportLn, err := cli.ListenReports(net.JoinHostPort("127.0.0.1", strconv.Itoa(reportPort)))
			if err != nil {
				return fmt.Errorf("report server port: %w", err)
			}
			defer reportLn.Close()
			if cfg.ReportURL == "" {
				cfg.ReportURL = cli.ReportURLTemplate(reportLn.Addr().String())
			}
			stopTracing, err := app.StartTracing(ctx, otel, log)
			if err != nil {
				return err
			}
			defer stopTracing()
			s, err := startLocal(ctx, app, opts, s3Port, cfg, log)
			if err != nil {
				return err
			}
			defer s.close()
			store, err := storage.Open(ctx, s.store, log.With("component", "s3"))
			if err != nil {
				log.Warn("reports leave out what lives in the object store", "error", err)
				store = nil
			}
			links := cli.ReportLinks{UIAddress: s.server.UIAddress(), Namespace: s.server.Namespace()}
			reports := cli.ServeReports(reportLn, s.client, store, links, log.With("component", "reports"))
			defer reports.Stop()
			out := app.Out
			fmt.Fprintln(out, "retrain dev stack is up")
			fmt.Fprintf(out, "  Temporal:  %s (namespace %s)\n", s.server.FrontendAddress(), s.server.Namespace())
			fmt.Fprintf(out, "  HTTP API:  %s/api/v1/namespaces/%s/workflows (docs/http-api.md)\n", s.server.HTTPAddress(), s.server.Namespace())
			if ui := s.server.UIAddress(); ui != "" {
				fmt.Fprintf(out, "  Web UI:    %s\n", ui)
			}
			if s.s3 != nil {
				fmt.Fprintf(out, "  S3:        %s (bucket %s; objects are files under %s, credentials in %s)\n",
					s.s3.Endpoint(), s.s3.Bucket(), s.s3.Root(), storage.DevConnectionPath(opts.DataDir))
			} else {
				fmt.Fprintf(out, "  S3:        %s (--s3-uri)\n", cfg.Store.S3.URI)
			}
			fmt.Fprintf(out, "  Reports:   %s\n", cli.ReportURLTemplate(reportLn.Addr().String()))
			fmt.Fprintf(out, "  Data:      %s\n", opts.DataDir)
			fmt.Fprintf(out, "  Worker:    task queue %s\n", cfg.TaskQueue)
			// Name a pipeline this worker has: with --pipelines DIR, the
			// folder's rather than the built-in examples.
			names, first := pipelineNames(cfg.PipelinesDir)
			fmt.Fprintf(out, "  Pipelines: %s\n", names)
			fmt.Fprintln(out, "Start a run:")
			fmt.Fprintf(out, "  retrain run %s --wait --address %s\n", first, s.server.FrontendAddress())
			fmt.Fprintf(out, "  or in the Web UI: Start Workflow, type %q, task queue %q, input {\"pipeline\": %q}\n", "Pipeline", cfg.TaskQueue, first)
			fmt.Fprintln(out, "Ctrl-C stops the stack; its state stays in the data dir.")
			<-ctx.Done()
			fmt.Fprintln(out, "stopping")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.DataDir, "data-dir", storage.DefaultDataDir, "where the stack keeps its state")
	f.BoolVar(&opts.Headless, "headless", false, "do not serve the Web UI")
	f.IntVar(&opts.Port, "port", 7233, "Temporal frontend gRPC port")
	f.IntVar(&opts.HTTPPort, "http-port", 7243, "Temporal HTTP API port (start, watch and list runs with curl or any HTTP client; 0 picks a free one)")
	f.IntVar(&opts.UIPort, "ui-port", 8233, "Web UI port")
	f.IntVar(&s3Port, "s3-port", 7070, "S3 server port (checkpoints and models; 0 picks a free one)")
	f.IntVar(&reportPort, "report-port", 8234, "HTTP port serving run reports at /runs/RUN (0 picks a free one)")
	cfg.AddFlags(f)
	otel.AddFlags(f, "retrain-dev")
	// The dev stack is one person's: running a spec file (`retrain run
	// FILE`) is what it is for, so its worker accepts inline specs.
	cfg.AllowInlineSpecs = true
	f.Lookup("allow-inline-specs").DefValue = "true"
	return cmd
}

// pipelineNames lists the pipelines a dev worker can run by name — the
// folder's with --pipelines, else the built-in examples — and one to
// suggest (hello when it is there).
func pipelineNames(dir string) (list, first string) {
	lib := dags.NewLibrary(examples.FS)
	where := "built-in examples"
	if dir != "" {
		lib, where = dags.NewLibrary(os.DirFS(dir)), dir
	}
	names, _ := lib.List() // two files of one name: the worker says so when a run names it
	if len(names) == 0 {
		return fmt.Sprintf("none found in %s", where), "NAME"
	}
	first = names[0]
	if slices.Contains(names, "hello") {
		first = "hello"
	}
	const shown = 8
	more := ""
	if len(names) > shown {
		more = fmt.Sprintf(", ... (%d in all)", len(names))
		names = names[:shown]
	}
	return fmt.Sprintf("%s%s (%s)", strings.Join(names, ", "), more, where), first
}
