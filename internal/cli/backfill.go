package cli

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/schedules"
)

// NewBackfillCommand returns `retrain backfill`: one run of a pipeline per
// date, for a pipeline with no schedule (one with a schedule: `retrain
// schedule backfill`, which keeps its overlap policy).
func NewBackfillCommand(app *App) *cobra.Command {
	var (
		from, to, queue string
		maxParallel     int
		params          []string
	)
	cmd := &cobra.Command{
		Use:   "backfill PIPELINE --from DATE --to DATE",
		Short: "Run a pipeline once per date from --from to --to (included), each run with that date as its logical date",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := checkPipelineName(args[0]); err != nil {
				return err
			}
			values, err := parseParams(params)
			if err != nil {
				return err
			}
			dates, err := schedules.Dates(from, to)
			if err != nil {
				return err
			}
			c, err := app.Conn.Dial(ctx, app.Logger())
			if err != nil {
				return err
			}
			defer c.Close()
			fmt.Fprintf(app.Err, "backfill %s: %d dates, at most %d at once\n", args[0], len(dates), max(maxParallel, 1))
			req := schedules.DateRequest{Pipeline: args[0], Params: values, From: from, To: to, MaxParallel: maxParallel, TaskQueue: queue}
			failed := 0
			_, err = schedules.BackfillDates(ctx, c, req, func(r schedules.DateRun) {
				switch {
				case r.Err != nil:
					failed++
					fmt.Fprintf(app.Out, "%s  error      %s  %v\n", r.Date, backfillRunID(r.ID), r.Err)
				default:
					if r.Result.Status != runs.StatusSucceeded {
						failed++
					}
					fmt.Fprintf(app.Out, "%s  %-9s  %s  %s\n", r.Date, r.Result.Status, r.ID, backfillDuration(r.Result))
				}
			})
			if err != nil {
				return err
			}
			if failed > 0 {
				return &ExitError{Code: 2, Err: fmt.Errorf("%d of %d runs did not succeed", failed, len(dates))}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "first date, YYYY-MM-DD (required)")
	cmd.Flags().StringVar(&to, "to", "", "last date, YYYY-MM-DD, included (required)")
	cmd.Flags().IntVar(&maxParallel, "max-parallel", 1, "runs at once")
	cmd.Flags().StringArrayVarP(&params, "param", "p", nil, "parameter as key=value, the same for every date (repeatable)")
	cmd.Flags().StringVar(&queue, "task-queue", runs.DefaultTaskQueue, "task queue the workers poll")
	_ = cmd.MarkFlagRequired("from")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

func backfillRunID(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func backfillDuration(res *runs.Result) string {
	if res.EndedAt == nil {
		return "-"
	}
	return res.EndedAt.Sub(res.StartedAt).Round(100 * time.Millisecond).String()
}

// checkPipelineName refuses what is a file path rather than the name of a
// pipeline the workers know: runs named after it would have ids holding
// "/" and fail on the worker, where only `retrain status` says why.
func checkPipelineName(name string) error {
	if strings.ContainsAny(name, `/\`) || strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") {
		base := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(name), ".yaml"), ".yml")
		return fmt.Errorf("backfill takes the name of a pipeline in the workers' pipeline folder, not a file: "+
			"%q; name it (e.g. `retrain backfill %s ...`, its spec's `name`), and start the workers with --pipelines on the folder that holds it", name, base)
	}
	return nil
}
