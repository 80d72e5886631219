package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/retrain-ml/retrain/runs"
)

// NewRerunCommand returns `retrain rerun`: a new run of an earlier run's
// pipeline, params and logical date that takes over the earlier run's
// node results it need not compute again.
func NewRerunCommand(app *App) *cobra.Command {
	var (
		from         []string
		params       []string
		wait, asJSON bool
		id, queue    string
	)
	cmd := &cobra.Command{
		Use:   "rerun RUN",
		Short: "Run an earlier run's pipeline again, reusing its succeeded nodes (--from NODE: run NODE and what follows again)",
		Long: `rerun starts a new run of the pipeline RUN ran, with RUN's params (--param overrides
one) and logical date. It takes over RUN's results of the nodes it need not run again
and runs the rest: without --from, the nodes that failed, were cancelled or skipped by
the failure; with --from NODE (repeatable), NODE and everything downstream of it too.
A node is reused only when it succeeded in RUN, its definition and the params it reads
are unchanged, no on_failure node of RUN undid it, every node it needs is reused, and
what its outputs point to still exists (objects, table snapshots, model versions);
otherwise it runs, and the node table says why. The new run names RUN as the run it
reused.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			values, err := parseParams(params)
			if err != nil {
				return err
			}
			c, err := app.Conn.Dial(ctx, app.Logger())
			if err != nil {
				return err
			}
			defer c.Close()
			run, err := runs.Rerun(ctx, c, runs.RerunRequest{Run: args[0], From: from, Params: values, ID: id, TaskQueue: queue})
			if err != nil {
				return err
			}
			outcome, err := awaitResolve(ctx, c, run.ID, resolveWait)
			if err != nil {
				return err
			}
			app.useNamespaceUI(ctx, cmd, c)
			if outcome == resolvePending {
				fmt.Fprintf(app.Err, "run %s (rerun of %s) submitted, but no worker has resolved its pipeline yet (is one polling task queue %s?)\n", run.ID, args[0], queue)
			} else {
				fmt.Fprintf(app.Err, "run %s started: a rerun of %s\n", run.ID, args[0])
			}
			if app.UIAddress != "" {
				fmt.Fprintf(app.Err, "  %s\n", app.RunLink(run.ID, run.RunID))
			}
			if !wait {
				if asJSON {
					return json.NewEncoder(app.Out).Encode(map[string]string{"id": run.ID, "run_id": run.RunID, "reuses": args[0]})
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
	cmd.Flags().StringArrayVar(&from, "from", nil, "node to run again with everything downstream of it (repeatable; default: what did not succeed)")
	cmd.Flags().StringArrayVarP(&params, "param", "p", nil, "parameter as key=value, overriding the earlier run's (repeatable)")
	cmd.Flags().BoolVar(&wait, "wait", false, "show live per-node progress and wait; exit 0 only if the run succeeded")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	cmd.Flags().StringVar(&id, "id", "", "the new run's id (default: pipeline name, time and a random suffix)")
	cmd.Flags().StringVar(&queue, "task-queue", runs.DefaultTaskQueue, "task queue the workers poll")
	return cmd
}
