package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/schedules"
)

// NewScheduleCommand returns `retrain schedule`: the Temporal Schedules
// that the specs' schedules declare.
func NewScheduleCommand(app *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Apply the specs' schedules to Temporal, and list, pause, trigger or backfill them",
		Long: "Schedule ids are retrain/<pipeline>/<schedule id>; the commands that take an ID also take\n" +
			"<pipeline>/<schedule id>, or the spec's schedule id alone when one pipeline has it.",
	}
	cmd.AddCommand(newScheduleApply(app), newScheduleList(app), newScheduleDescribe(app))
	cmd.AddCommand(newScheduleSimple(app, "pause", "Pause a schedule: it starts no run until unpaused", func(ctx context.Context, h client.ScheduleHandle, note string) error {
		return h.Pause(ctx, client.SchedulePauseOptions{Note: pauseNote("paused", note)})
	}))
	cmd.AddCommand(newScheduleSimple(app, "unpause", "Unpause a schedule", func(ctx context.Context, h client.ScheduleHandle, note string) error {
		return h.Unpause(ctx, client.ScheduleUnpauseOptions{Note: pauseNote("unpaused", note)})
	}))
	cmd.AddCommand(newScheduleSimple(app, "trigger", "Start the schedule's action now (its overlap policy applies)", func(ctx context.Context, h client.ScheduleHandle, _ string) error {
		return h.Trigger(ctx, client.ScheduleTriggerOptions{})
	}))
	cmd.AddCommand(newScheduleSimple(app, "delete", "Delete a schedule (its runs go on)", func(ctx context.Context, h client.ScheduleHandle, _ string) error {
		return h.Delete(ctx)
	}))
	cmd.AddCommand(newScheduleBackfill(app))
	return cmd
}

func newScheduleApply(app *App) *cobra.Command {
	var dryRun, prune bool
	var queue string
	cmd := &cobra.Command{
		Use:   "apply FILE|DIR...",
		Short: "Create, update and (with --prune) delete Temporal Schedules so they match the specs' schedules",
		Long: "Validates every spec, then makes each schedule they declare exist as declared. A schedule\n" +
			"whose spec did not change is left alone (paused or not). --prune deletes the retrain/\n" +
			"schedules that none of the given specs declares, whatever their pipeline.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			specs, files, err := loadScheduleSpecs(args)
			if err != nil {
				return err
			}
			c, err := app.Conn.Dial(ctx, app.Logger())
			if err != nil {
				return err
			}
			defer c.Close()
			changes, err := schedules.Apply(ctx, c, specs, schedules.ApplyOptions{
				TaskQueue: queue, Namespace: app.Conn.Namespace, DryRun: dryRun, Prune: prune, Files: files,
			})
			for _, ch := range changes {
				fmt.Fprintln(app.Out, ch)
			}
			if err != nil {
				return err
			}
			fmt.Fprintln(app.Out, summarizeChanges(changes, dryRun))
			warnNoWorkers(ctx, app, c, app.Conn.Namespace, queue, specs, !dryRun) // scheduleworkers.go
			return nil
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print what would change; change nothing")
	cmd.Flags().BoolVar(&prune, "prune", false, "delete retrain/ schedules no given spec declares")
	cmd.Flags().StringVar(&queue, "task-queue", runs.DefaultTaskQueue, "task queue the scheduled runs go to")
	return cmd
}

// summarizeChanges counts the changes: "no change (2 unchanged)" or "1 created,
// 1 unchanged".
func summarizeChanges(changes []schedules.Change, dryRun bool) string {
	count := map[string]int{}
	for _, ch := range changes {
		count[ch.Action]++
	}
	var parts []string
	for _, a := range []struct{ action, word string }{{schedules.Created, "created"}, {schedules.Updated, "updated"}, {schedules.Deleted, "deleted"}} {
		if n := count[a.action]; n > 0 {
			word := a.word
			if dryRun {
				word = "to be " + word
			}
			parts = append(parts, fmt.Sprintf("%d %s", n, word))
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("no change (%d unchanged)", count[schedules.Unchanged])
	}
	if n := count[schedules.Unchanged]; n > 0 {
		parts = append(parts, fmt.Sprintf("%d unchanged", n))
	}
	return strings.Join(parts, ", ")
}

// loadScheduleSpecs loads and validates the specs in files and directories (their
// .yaml, .yml and .json files but test files, not recursively), and maps
// each pipeline to its file.
func loadScheduleSpecs(args []string) ([]*dags.Spec, map[string]string, error) {
	var paths []string
	for _, arg := range args {
		st, err := os.Stat(arg)
		if err != nil {
			return nil, nil, err
		}
		if !st.IsDir() {
			paths = append(paths, arg)
			continue
		}
		entries, err := os.ReadDir(arg)
		if err != nil {
			return nil, nil, err
		}
		for _, e := range entries {
			if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml" || ext == ".json") && !dags.IsTestFile(e.Name()) {
				paths = append(paths, filepath.Join(arg, e.Name()))
			}
		}
	}
	var specs []*dags.Spec
	files := map[string]string{}
	var problems []string
	for _, p := range paths {
		spec, err := LoadSpec(p)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if prev, dup := files[spec.Name]; dup {
			problems = append(problems, fmt.Sprintf("%s: pipeline %s is also declared by %s", p, spec.Name, prev))
			continue
		}
		files[spec.Name] = p
		specs = append(specs, spec)
	}
	if len(problems) > 0 {
		return nil, nil, fmt.Errorf("%s", strings.Join(problems, "\n"))
	}
	return specs, files, nil
}

// resolveScheduleID turns what a user typed into a Temporal schedule id:
// a full id, <pipeline>/<id>, or a spec schedule id that one pipeline has.
func resolveScheduleID(ctx context.Context, c client.Client, arg string) (string, error) {
	if strings.HasPrefix(arg, schedules.Prefix) {
		return arg, nil
	}
	if strings.Contains(arg, "/") {
		return schedules.Prefix + arg, nil
	}
	// The list reads visibility, which lags a just-applied schedule by a
	// moment; a short name that is not there yet is looked for again
	// for a few seconds before it is reported missing.
	var match []string
	for deadline := time.Now().Add(5 * time.Second); ; {
		ids, err := schedules.ListIDs(ctx, c)
		if err != nil {
			return "", err
		}
		match = match[:0]
		for _, id := range ids {
			if _, sc, ok := schedules.Split(id); ok && sc == arg {
				match = append(match, id)
			}
		}
		if len(match) > 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	switch len(match) {
	case 0:
		return "", fmt.Errorf("no schedule %q (retrain schedule list shows them)", arg)
	case 1:
		return match[0], nil
	}
	return "", fmt.Errorf("schedule %q is ambiguous: %s", arg, strings.Join(match, ", "))
}

// dialSchedule dials and resolves the schedule named by arg.
func dialSchedule(cmd *cobra.Command, app *App, arg string) (client.Client, string, error) {
	c, err := app.Conn.Dial(cmd.Context(), app.Logger())
	if err != nil {
		return nil, "", err
	}
	id, err := resolveScheduleID(cmd.Context(), c, arg)
	if err != nil {
		c.Close()
		return nil, "", err
	}
	return c, id, nil
}

func newScheduleSimple(app *App, verb, short string, do func(context.Context, client.ScheduleHandle, string) error) *cobra.Command {
	var note string
	cmd := &cobra.Command{
		Use:   verb + " ID",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, id, err := dialSchedule(cmd, app, args[0])
			if err != nil {
				return err
			}
			defer c.Close()
			if err := do(cmd.Context(), c.ScheduleClient().GetHandle(cmd.Context(), id), note); err != nil {
				return fmt.Errorf("%s schedule %s: %w", verb, id, err)
			}
			fmt.Fprintf(app.Out, "%s: %s\n", id, map[string]string{"pause": "paused", "unpause": "unpaused", "trigger": "triggered", "delete": "deleted"}[verb])
			return nil
		},
	}
	if verb == "pause" || verb == "unpause" {
		cmd.Flags().StringVar(&note, "note", "", "why (shown in describe and the Web UI)")
	}
	return cmd
}

// scheduleRow is what list prints of a schedule.
type scheduleRow struct {
	ID         string     `json:"id"`
	Pipeline   string     `json:"pipeline"`
	Schedule   string     `json:"schedule"`
	Paused     bool       `json:"paused"`
	Next       *time.Time `json:"next,omitempty"`
	LastAction *time.Time `json:"last_action,omitempty"`
	Note       string     `json:"note,omitempty"`
}

func newScheduleList(app *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the schedules retrain manages (ids starting retrain/)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, err := app.Conn.Dial(ctx, app.Logger())
			if err != nil {
				return err
			}
			defer c.Close()
			it, err := c.ScheduleClient().List(ctx, client.ScheduleListOptions{PageSize: 500})
			if err != nil {
				return fmt.Errorf("list schedules: %w", err)
			}
			rows := []scheduleRow{}
			for it.HasNext() {
				e, err := it.Next()
				if err != nil {
					return fmt.Errorf("list schedules: %w", err)
				}
				p, sc, ok := schedules.Split(e.ID)
				if !ok {
					continue
				}
				r := scheduleRow{ID: e.ID, Pipeline: p, Schedule: sc, Paused: e.Paused, Note: e.Note}
				if len(e.NextActionTimes) > 0 {
					r.Next = &e.NextActionTimes[0]
				}
				if n := len(e.RecentActions); n > 0 {
					r.LastAction = &e.RecentActions[n-1].ScheduleTime
				}
				rows = append(rows, r)
			}
			slices.SortFunc(rows, func(a, b scheduleRow) int { return strings.Compare(a.ID, b.ID) })
			if asJSON {
				enc := json.NewEncoder(app.Out)
				enc.SetIndent("", "  ")
				return enc.Encode(rows)
			}
			tw := tabwriter.NewWriter(app.Out, 0, 2, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tPAUSED\tNEXT\tLAST ACTION\tNOTE")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%v\t%s\t%s\t%s\n", r.ID, r.Paused, scheduleTime(r.Next), scheduleTime(r.LastAction), listNote(r))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func scheduleTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func newScheduleDescribe(app *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "describe ID",
		Short: "Show a schedule: its spec, state, next and recent actions, running runs",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, id, err := dialSchedule(cmd, app, args[0])
			if err != nil {
				return err
			}
			defer c.Close()
			desc, err := c.ScheduleClient().GetHandle(cmd.Context(), id).Describe(cmd.Context())
			if err != nil {
				return fmt.Errorf("describe schedule %s: %w", id, err)
			}
			rec, _ := schedules.RecordOf(desc)
			if asJSON {
				enc := json.NewEncoder(app.Out)
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{"id": id, "spec": rec, "state": desc.Schedule.State, "info": desc.Info})
			}
			printSchedule(app, id, rec, desc)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printSchedule(app *App, id string, rec schedules.Record, desc *client.ScheduleDescription) {
	w := app.Out
	fmt.Fprintf(w, "schedule  %s\n", id)
	fmt.Fprintf(w, "pipeline  %s (task queue %s)\n", rec.Pipeline, rec.TaskQueue)
	when := "cron " + rec.Cron
	if rec.Every != "" {
		when = "every " + rec.Every
	}
	if rec.Timezone != "" {
		when += " in " + rec.Timezone
	}
	fmt.Fprintf(w, "fires     %s\n", when)
	if fire, latest, err := schedules.FireCron(rec); err == nil && rec.WhenReady {
		fmt.Fprintf(w, "when      ready: each date's run starts at %s (cron %s) and waits for its data; %s is its latest start\n",
			rec.Earliest, fire, latest)
	}
	fmt.Fprintf(w, "overlap   %s", rec.Overlap)
	if rec.PauseOnFailure {
		fmt.Fprint(w, ", pause on failure")
	}
	if rec.CatchupWindow != "" {
		fmt.Fprintf(w, ", catch-up window %s", rec.CatchupWindow)
	}
	if rec.Jitter != "" {
		fmt.Fprintf(w, ", jitter %s", rec.Jitter)
	}
	fmt.Fprintln(w)
	if len(rec.Params) > 0 {
		b, _ := json.Marshal(rec.Params)
		fmt.Fprintf(w, "params    %s\n", b)
	}
	if rec.File != "" {
		fmt.Fprintf(w, "from      %s\n", rec.File)
	}
	printDSTLine(w, rec)
	if st := desc.Schedule.State; st != nil {
		fmt.Fprintf(w, "paused    %v", st.Paused)
		if st.Note != "" {
			fmt.Fprintf(w, " (%s)", st.Note)
		}
		fmt.Fprintln(w)
	}
	info := desc.Info
	fmt.Fprintf(w, "actions   %d taken, %d skipped for overlap, %d missed the catch-up window\n", info.NumActions, info.NumActionsSkippedOverlap, info.NumActionsMissedCatchupWindow)
	for i, t := range info.NextActionTimes {
		if i == 3 {
			break
		}
		fmt.Fprintf(w, "next      %s\n", localAction(t, rec.Timezone))
	}
	for _, a := range info.RecentActions {
		wid := ""
		if a.StartWorkflowResult != nil {
			wid = a.StartWorkflowResult.WorkflowID
		}
		fmt.Fprintf(w, "recent    %s  %s\n", a.ScheduleTime.UTC().Format(time.RFC3339), wid)
	}
	for _, r := range info.RunningWorkflows {
		fmt.Fprintf(w, "running   %s\n", r.WorkflowID)
	}
}
