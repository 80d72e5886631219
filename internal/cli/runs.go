package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/retrain-ml/retrain/runs"
)

// NewRunsCommand returns `retrain runs`: the history of runs.
func NewRunsCommand(app *App) *cobra.Command {
	cmd := &cobra.Command{Use: "runs", Short: "List past and running runs"}
	var (
		o      runs.ListOptions
		status string
		since  string
		asJSON bool
		warnAt int
	)
	list := &cobra.Command{
		Use:   "list",
		Short: "List runs, newest first: logical date, status, duration, the gate's verdict and what was deployed",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			o.Status = runs.Status(status)
			if since != "" {
				t, err := parseSince(since, time.Now())
				if err != nil {
					return err
				}
				o.Since = t
			}
			if _, err := o.Query(); err != nil {
				return err // a bad --status, before dialling
			}
			o.Namespace = app.Conn.Namespace
			c, err := app.Conn.Dial(ctx, app.Logger())
			if err != nil {
				return err
			}
			defer c.Close()
			list, err := runs.List(ctx, c, o)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(app.Out)
				enc.SetIndent("", "  ")
				if list == nil {
					list = []runs.RunInfo{}
				}
				if err := enc.Encode(list); err != nil {
					return err
				}
			} else {
				PrintRuns(app.Out, list, time.Now())
			}
			// A status filter hides the runs that break a streak, and a
			// summary has no verdicts: no warning from those.
			if o.Status == "" && !o.Summary {
				PrintRejectedStreaks(app.Err, runs.RejectedStreaks(list, warnAt))
			}
			return nil
		},
	}
	f := list.Flags()
	f.StringVar(&o.Pipeline, "pipeline", "", "only runs of this pipeline")
	f.StringVar(&status, "status", "", "only runs in this status: running, succeeded, failed, cancelled, terminated, timed_out")
	f.StringVar(&since, "since", "", "only runs started since: a duration back from now (36h, 7d) or a date or time (2026-11-01, RFC 3339)")
	f.StringVar(&o.Schedule, "schedule", "", "only runs this schedule started: a spec schedule id (daily, with --pipeline) or a Temporal schedule id (retrain/PIPELINE/daily)")
	f.IntVar(&o.Limit, "limit", 20, "at most this many runs")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.IntVar(&warnAt, "warn-rejected", runs.DefaultRejectedStreak, "warn (on stderr) about a pipeline whose gate rejected this many of its latest scheduled runs in a row; 0: never")
	cmd.AddCommand(list)
	return cmd
}

// parseSince reads --since: a duration back from now (Go's, or whole days
// as "7d"), a date (midnight UTC) or an RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n int
		if _, err := fmt.Sscanf(days, "%d", &n); err == nil && fmt.Sprint(n) == days && n >= 0 {
			return now.AddDate(0, 0, -n), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("--since %q: want a duration (36h, 7d), a date (2026-11-01) or an RFC 3339 time", s)
}

// PrintRuns prints runs as a table; now dates the running ones' durations.
func PrintRuns(w io.Writer, list []runs.RunInfo, now time.Time) {
	if len(list) == 0 {
		fmt.Fprintln(w, "no runs")
		return
	}
	// A rerun names the run it reused in a last column, there only
	// when the list holds a rerun.
	reruns := slices.ContainsFunc(list, func(r runs.RunInfo) bool { return r.ReusedFrom != "" })
	// A run waiting for its data says what for, in a last column there
	// only when one waits.
	waits := slices.ContainsFunc(list, func(r runs.RunInfo) bool { return r.Waiting != "" })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "RUN\tPIPELINE\tLOGICAL DATE\tSTATUS\tSTARTED\tDURATION\tGATE\tDEPLOYED"
	if reruns {
		head += "\tREUSED FROM"
	}
	if waits {
		head += "\tWAITING FOR"
	}
	fmt.Fprintln(tw, head)
	for _, r := range list {
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", r.ID, dash(r.Pipeline), dash(r.LogicalDate), statusWord(r.Status),
			r.StartedAt.Local().Format(time.DateTime), shortDuration(r.Duration(now)), dash(r.Gate), dash(r.Deployed))
		if reruns {
			line += "\t" + dash(r.ReusedFrom)
		}
		if waits {
			line += "\t" + dash(r.Waiting)
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
}

// PrintRejectedStreaks warns about each pipeline whose gate rejected its
// latest scheduled runs in a row: those runs end succeeded (on_reject:
// skip) and ship nothing, which a table of green runs would hide.
func PrintRejectedStreaks(w io.Writer, streaks []runs.RejectedStreak) {
	for _, s := range streaks {
		count := fmt.Sprint(len(s.Runs))
		if s.AtLeast {
			count += " (or more: older runs are not listed)"
		}
		shown := s.Runs
		more := ""
		if len(shown) > 5 {
			shown, more = shown[:5], ", ..."
		}
		fmt.Fprintf(w, "warning: pipeline %s: its gate rejected its last %s scheduled runs in a row (%s%s): nothing they trained shipped; `retrain status RUN` shows the failed checks\n",
			s.Pipeline, count, strings.Join(shown, ", "), more)
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shortDuration rounds a duration to what a person reads at a glance:
// 850ms, 12.3s, 4m05s, 2h10m, 3d04h.
func shortDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

// statusWord is a run's status as tables show it: WAITING stands out,
// as a run that has not started its work yet should.
func statusWord(s runs.Status) string {
	if s == runs.StatusWaiting {
		return "WAITING"
	}
	return string(s)
}
