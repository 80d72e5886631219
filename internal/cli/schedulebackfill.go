package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/schedules"
)

func newScheduleBackfill(app *App) *cobra.Command {
	var from, to, overlap string
	var maxParallel int
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "backfill ID --from DATE --to DATE",
		Short: "Run the actions the schedule would have taken on these dates (in its time zone), each with its own logical date: all of them, one after another",
		Long: "Starts one run per action the schedule takes on the dates (its nominal time gives its logical\n" +
			"date), whatever the schedule's overlap policy for live actions: one after another in date\n" +
			"order (buffer_all), or --max-parallel N at once (the actions are backfilled one at a time with\n" +
			"allow_all, the next when fewer than N run; the command stays until the last has started).\n" +
			"--overlap sets another policy for these runs. Prints the logical dates first and, after, how\n" +
			"many runs started.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, id, err := dialSchedule(cmd, app, args[0])
			if err != nil {
				return err
			}
			defer c.Close()
			plan, err := schedules.PlanBackfill(ctx, c, schedules.BackfillRequest{
				ID: id, Namespace: app.Conn.Namespace, From: from, To: to, Overlap: overlap, MaxParallel: maxParallel,
			})
			if err != nil {
				return err
			}
			printBackfillPlan(app, plan, from, to)
			if len(plan.Times) == 0 {
				return nil
			}
			// A few seconds' margin: the server's clock stamps the runs.
			since := time.Now().Add(-5 * time.Second)
			err = plan.Run(ctx, c, since, func(t time.Time, run string) {
				fmt.Fprintf(app.Out, "started   %s  %s\n", plan.Date(t), run)
			})
			if err != nil {
				return err
			}
			return reportBackfillStarts(ctx, app, c, plan, since, wait)
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "first date, YYYY-MM-DD (required)")
	cmd.Flags().StringVar(&to, "to", "", "last date, YYYY-MM-DD, included (required)")
	cmd.Flags().StringVar(&overlap, "overlap", "", "overlap policy for these runs: "+strings.Join(dags.Overlaps, ", ")+" (default buffer_all: every date, one after another)")
	cmd.Flags().IntVar(&maxParallel, "max-parallel", 1, "run up to N dates at once (allow_all, one action at a time)")
	cmd.Flags().DurationVar(&wait, "wait", 15*time.Second, "how long to wait for the runs to show in visibility before counting them (0: do not count)")
	_ = cmd.MarkFlagRequired("from")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

// printBackfillPlan prints the logical dates a backfill starts, each with
// its local time.
func printBackfillPlan(app *App, plan *schedules.BackfillPlan, from, to string) {
	runsWord := "runs"
	if len(plan.Times) == 1 {
		runsWord = "run"
	}
	fmt.Fprintf(app.Out, "%s: backfill %s..%s in %s: %d %s (%s)\n", plan.ID, from, to, plan.Location, len(plan.Times), runsWord, plan.How())
	// A when_ready schedule's runs start at earliest and wait for their
	// date's data, its cron time being their latest start.
	_, latest, _ := schedules.FireCron(plan.Record)
	for _, t := range plan.Times {
		line := fmt.Sprintf("  %s  %s", plan.Date(t), t.In(plan.Location).Format("15:04 MST"))
		if latest != "" {
			line += fmt.Sprintf(", waits for its data (latest start %s)", latest)
		}
		if note := plan.Note(t); note != "" {
			line += "  (" + note + ")"
		}
		fmt.Fprintln(app.Out, line)
	}
}

// reportBackfillStarts waits a little for the runs to show in visibility
// and says how many started. It stops early once runs started and no more
// came for a few seconds (buffered runs start as the ones before end).
func reportBackfillStarts(ctx context.Context, app *App, c client.Client, plan *schedules.BackfillPlan, since time.Time, wait time.Duration) error {
	if wait <= 0 {
		return nil
	}
	deadline := time.Now().Add(wait)
	last, lastChange := -1, time.Now()
	var runs map[int64]schedules.BackfillRun
	for {
		var err error
		if runs, err = plan.Started(ctx, c, since); err != nil {
			return err
		}
		if len(runs) != last {
			last, lastChange = len(runs), time.Now()
		}
		if len(runs) >= len(plan.Times) || time.Now().After(deadline) || (len(runs) > 0 && time.Since(lastChange) > 3*time.Second) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	n := len(plan.Times)
	if len(runs) >= n {
		fmt.Fprintf(app.Out, "%d of %d runs started\n", len(runs), n)
		return nil
	}
	fmt.Fprintf(app.Out, "%d of %d runs started so far; the other %d start later (%s): retrain runs list --schedule %s\n",
		len(runs), n, n-len(runs), plan.How(), plan.ID)
	return nil
}
