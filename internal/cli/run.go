package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/retrain-ml/retrain/worker"

	"github.com/spf13/cobra"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/internal/tracing"
	"github.com/retrain-ml/retrain/runs"
)

// NewRunCommand returns `retrain run`: validate a spec and start a run.
func NewRunCommand(app *App) *cobra.Command {
	var (
		params       []string
		wait, asJSON bool
		dry          bool
		pipelines    string
		schedule     string
		id, queue    string
		logicalDate  string
		parallelism  int
		noCache      bool
		refresh      []string
		otel         tracing.Options
	)
	cmd := &cobra.Command{
		Use:   "run FILE|PIPELINE",
		Short: "Validate a spec and start a run (a file, or the name of a pipeline the workers know)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			values, err := parseParams(params)
			if err != nil {
				return err
			}
			if err := checkLogicalDate(logicalDate); err != nil {
				return err
			}
			if dry {
				return dryRun(app.Out, dryRunOptions{target: args[0], params: values, logicalDate: logicalDate, id: id,
					schedule: schedule, pipelines: pipelines, asJSON: asJSON, now: time.Now()})
			}
			req := runs.Request{Params: values, Parallelism: parallelism, ID: id, TaskQueue: queue, LogicalDate: logicalDate,
				NoCache: noCache, Refresh: refresh}
			if isFile(args[0]) {
				// Read once: the bytes checked here are the bytes sent.
				data, err := os.ReadFile(args[0])
				if err != nil {
					return err
				}
				spec, err := dags.Parse(args[0], data)
				if err != nil {
					return err
				}
				// Compile validates and binds params, so a wrong spec or
				// param fails before any run starts.
				if _, err := dags.Compile(spec, worker.Types(), values); err != nil {
					return err
				}
				for _, n := range refresh {
					if spec.Node(n) == nil {
						return fmt.Errorf("--refresh %s: %s has no node %q", n, args[0], n)
					}
				}
				req.Spec, req.SpecFile = data, filepath.Base(args[0])
				if id == "" {
					req.ID = runs.NewID(spec.Name)
				}
			} else {
				req.Pipeline = args[0]
			}

			stopTracing, err := app.StartTracing(ctx, otel, app.Logger())
			if err != nil {
				return err
			}
			defer stopTracing()
			c, err := app.Conn.Dial(ctx, app.Logger())
			if err != nil {
				return err
			}
			defer c.Close()
			run, err := runs.Start(ctx, c, req)
			if err != nil {
				return err
			}
			// The worker resolves the pipeline (a name it must know, params
			// its spec must accept, an inline spec it must allow): wait for
			// that, so a run that can never start fails here, not later in
			// `status`.
			outcome, err := awaitResolve(ctx, c, run.ID, resolveWait)
			if err != nil {
				return err
			}
			app.useNamespaceUI(ctx, cmd, c)
			if outcome == resolvePending {
				fmt.Fprintf(app.Err, "run %s submitted, but no worker has resolved its pipeline yet (is one polling task queue %s?)\n", run.ID, queue)
			} else {
				fmt.Fprintf(app.Err, "run %s started\n", run.ID)
			}
			if app.UIAddress != "" {
				fmt.Fprintf(app.Err, "  %s\n", app.RunLink(run.ID, run.RunID))
			}
			if !wait {
				if asJSON {
					return json.NewEncoder(app.Out).Encode(map[string]string{"id": run.ID, "run_id": run.RunID})
				}
				fmt.Fprintln(app.Out, run.ID)
				return nil
			}
			res, err := follow(ctx, c, run.ID, newLiveView(app.Err))
			if err != nil {
				return err
			}
			return app.report(res, asJSON)
		},
	}
	cmd.Flags().StringArrayVarP(&params, "param", "p", nil, "parameter as key=value (repeatable)")
	cmd.Flags().BoolVar(&wait, "wait", false, "show live per-node progress and wait; exit 0 only if the run succeeded")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	cmd.Flags().StringVar(&id, "id", "", "run id (default: pipeline name, time and a random suffix)")
	cmd.Flags().StringVar(&queue, "task-queue", runs.DefaultTaskQueue, "task queue the workers poll")
	cmd.Flags().IntVar(&parallelism, "parallelism", 0, "max nodes at once (default: the spec's)")
	cmd.Flags().StringVar(&logicalDate, "logical-date", "", "the date (YYYY-MM-DD) or time (RFC 3339) the run is for: ${run.logical_date} (default: now)")
	cmd.Flags().BoolVar(&noCache, "no-cache", false, "recompute every node marked cache: instead of reusing a cached result (the fresh results replace the cached ones)")
	cmd.Flags().StringArrayVar(&refresh, "refresh", nil, "recompute this cached node instead of reusing its cached result (repeatable)")
	cmd.Flags().BoolVar(&dry, "dry-run", false, "start nothing: print which nodes would run, skip or wait on outputs, each with its with resolved from the params and run values (needs no server)")
	cmd.Flags().StringVar(&pipelines, "pipelines", os.Getenv("RETRAIN_PIPELINES"), "with --dry-run: the folder of pipelines a PIPELINE name is looked up in, as the worker's --pipelines (default: the built-in examples; env RETRAIN_PIPELINES)")
	cmd.Flags().StringVar(&schedule, "schedule", "", "with --dry-run: as a run the spec's schedule ID starts (its params and time zone; -p over them)")
	otel.AddFlags(cmd.Flags(), "retrain")
	return cmd
}

// checkLogicalDate refuses a --logical-date the workflow would refuse, so
// the mistake shows before a run starts.
func checkLogicalDate(s string) error {
	if s == "" {
		return nil
	}
	if _, err := time.Parse(time.DateOnly, s); err == nil {
		return nil
	}
	if _, err := time.Parse(time.RFC3339, s); err == nil {
		return nil
	}
	return fmt.Errorf("--logical-date %q: want YYYY-MM-DD or an RFC 3339 time", s)
}

// NewStatusCommand returns `retrain status`.
func NewStatusCommand(app *App) *cobra.Command {
	var asJSON, follows bool
	cmd := &cobra.Command{
		Use:   "status RUN_ID",
		Short: "Show a run's nodes: status, attempts, times, outputs (--follow: live until it ends)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := app.Conn.Dial(ctx, app.Logger())
			if err != nil {
				return err
			}
			defer c.Close()
			if follows {
				res, err := follow(ctx, c, args[0], newLiveView(app.Out))
				if err != nil {
					return err
				}
				return app.report(res, asJSON)
			}
			res, err := runs.State(ctx, c, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(app.Out).Encode(res)
			}
			PrintSummary(app.Out, res)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the state as JSON")
	cmd.Flags().BoolVarP(&follows, "follow", "f", false, "show live per-node progress until the run ends; exit 0 only if it succeeded")
	return cmd
}

// report prints the final result and turns a run that did not succeed into
// a non-zero exit.
func (a *App) report(res *runs.Result, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(a.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		PrintSummary(a.Out, res)
	}
	if res.Status != runs.StatusSucceeded {
		return &ExitError{Code: 2, Err: fmt.Errorf("run %s: %s", res.Status, res.Error)}
	}
	return nil
}

func parseParams(kvs []string) (map[string]any, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	out := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--param %q: want key=value", kv)
		}
		out[k] = v // the spec's declared type converts it
	}
	return out, nil
}

func isFile(arg string) bool {
	if strings.HasSuffix(arg, ".yaml") || strings.HasSuffix(arg, ".yml") || strings.ContainsRune(arg, os.PathSeparator) {
		return true
	}
	st, err := os.Stat(arg)
	return err == nil && !st.IsDir()
}
