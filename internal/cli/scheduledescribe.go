package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/retrain-ml/retrain/schedules"
)

// localAction writes an action time in the schedule's time zone, with its
// UTC time: "2027-03-28 03:00 CEST (2027-03-28T01:00:00Z)".
func localAction(t time.Time, tz string) string {
	loc, err := time.LoadLocation(tz)
	if tz == "" || err != nil {
		return t.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("%s (%s)", t.In(loc).Format("2006-01-02 15:04 MST"), t.UTC().Format(time.RFC3339))
}

// printDSTLine says, for a cron whose time a clock change skips or repeats,
// what the next such days do.
func printDSTLine(w io.Writer, rec schedules.Record) {
	if rec.DaylightSaving == "" || rec.Cron == "" {
		return
	}
	fire, _, err := schedules.FireCron(rec) // what the schedule fires on
	if err != nil {
		return
	}
	adj, err := schedules.DaylightSaving(fire, rec.Timezone)
	if err != nil || adj.Empty() {
		return
	}
	loc, _ := time.LoadLocation(rec.Timezone)
	now := time.Now()
	var next []string
	for _, d := range adj.Days {
		if d.At.Before(now) {
			continue
		}
		what := "does not exist"
		if d.Repeat {
			what = "occurs twice"
		}
		next = append(next, fmt.Sprintf("%s %s %s: once at %s", d.Date, strings.Join(d.Missed, ","), what, d.At.In(loc).Format("15:04 MST")))
		if len(next) == 2 {
			break
		}
	}
	fmt.Fprintf(w, "dst       %d clock-change days get one run each", len(adj.Days))
	if len(next) > 0 {
		fmt.Fprintf(w, "; next: %s", strings.Join(next, "; "))
	}
	fmt.Fprintln(w)
}

// listNote is the note `schedule list` shows: a pause note, not apply's
// own note on a running schedule.
func listNote(r scheduleRow) string {
	if r.Note == "" || !r.Paused && strings.HasPrefix(r.Note, "managed by retrain schedule apply") {
		return "-"
	}
	return r.Note
}
