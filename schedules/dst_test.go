package schedules

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	schedulepb "go.temporal.io/api/schedule/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/server/service/worker/scheduler"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/retrain-ml/retrain/dags"
)

// temporalTimes computes the action times of a built schedule with
// Temporal's own spec code (the server's scheduler package, as the
// embedded server runs it), after from and up to to.
func temporalTimes(t *testing.T, spec client.ScheduleSpec, from, to time.Time) []time.Time {
	t.Helper()
	pb := &schedulepb.ScheduleSpec{
		CronString:                spec.CronExpressions,
		TimezoneName:              spec.TimeZoneName,
		StructuredCalendar:        structured(spec.Calendars),
		ExcludeStructuredCalendar: structured(spec.Skip),
		Jitter:                    durationpb.New(0),
	}
	scheduler.CleanSpec(pb) // as the frontend does
	cs, err := scheduler.NewSpecBuilder(func() int { return 0 }, func() int { return 0 }).NewCompiledSpec(pb)
	if err != nil {
		t.Fatal(err)
	}
	var out []time.Time
	for at := from; ; {
		r, err := cs.GetNextTime("", at)
		if err != nil {
			t.Fatal(err)
		}
		if r.Nominal.IsZero() || r.Nominal.After(to) {
			return out
		}
		out = append(out, r.Nominal)
		at = r.Nominal
	}
}

func structured(cals []client.ScheduleCalendarSpec) []*schedulepb.StructuredCalendarSpec {
	ranges := func(rs []client.ScheduleRange) []*schedulepb.Range {
		var out []*schedulepb.Range
		for _, r := range rs {
			out = append(out, &schedulepb.Range{Start: int32(r.Start), End: int32(r.End), Step: int32(r.Step)})
		}
		return out
	}
	var out []*schedulepb.StructuredCalendarSpec
	for _, c := range cals {
		if c.DayOfWeek == nil { // the SDK's default; the rest are set
			c.DayOfWeek = []client.ScheduleRange{{Start: 0, End: 6}}
		}
		out = append(out, &schedulepb.StructuredCalendarSpec{
			Second: ranges(c.Second), Minute: ranges(c.Minute), Hour: ranges(c.Hour),
			DayOfMonth: ranges(c.DayOfMonth), Month: ranges(c.Month), Year: ranges(c.Year),
			DayOfWeek: ranges(c.DayOfWeek), Comment: c.Comment,
		})
	}
	return out
}

// build builds a one-schedule spec's schedule.
func build(t *testing.T, cron, tz string) client.ScheduleOptions {
	t.Helper()
	o, err := Build("p", &dags.Schedule{ID: "nightly", Cron: cron, Timezone: tz}, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// localTimes writes times as "date hh:mm zone" in loc.
func localTimes(ts []time.Time, tz string) []string {
	loc, _ := time.LoadLocation(tz)
	var out []string
	for _, t := range ts {
		out = append(out, t.In(loc).Format("2006-01-02 15:04 MST"))
	}
	return out
}

// Around each change of 2026, a nightly cron fires once a day, on that
// day, in Berlin and New York alike; as Temporal computes it.
func TestDaylightSavingOneActionADay(t *testing.T) {
	cases := []struct {
		cron, tz, from, to string
		want               []string
	}{
		{"0 2 * * *", "Europe/Berlin", "2026-03-27", "2026-03-30", []string{
			"2026-03-27 02:00 CET", "2026-03-28 02:00 CET", "2026-03-29 03:00 CEST", "2026-03-30 02:00 CEST"}},
		{"0 2 * * *", "Europe/Berlin", "2026-10-24", "2026-10-26", []string{
			"2026-10-24 02:00 CEST", "2026-10-25 02:00 CET", "2026-10-26 02:00 CET"}},
		{"30 2 * * *", "Europe/Berlin", "2026-03-28", "2026-03-30", []string{
			"2026-03-28 02:30 CET", "2026-03-29 03:00 CEST", "2026-03-30 02:30 CEST"}},
		{"0 2 * * *", "America/New_York", "2026-03-07", "2026-03-09", []string{
			"2026-03-07 02:00 EST", "2026-03-08 03:00 EDT", "2026-03-09 02:00 EDT"}},
		{"0 2 * * *", "America/New_York", "2026-10-31", "2026-11-02", []string{
			"2026-10-31 02:00 EDT", "2026-11-01 02:00 EST", "2026-11-02 02:00 EST"}},
		{"0 1 * * *", "America/New_York", "2026-10-31", "2026-11-02", []string{
			"2026-10-31 01:00 EDT", "2026-11-01 02:00 EST", "2026-11-02 01:00 EST"}},
		{"30 1 * * *", "America/New_York", "2026-10-31", "2026-11-02", []string{
			"2026-10-31 01:30 EDT", "2026-11-01 02:00 EST", "2026-11-02 01:30 EST"}},
		// Past and later years too (backfills), under the older US rules.
		{"0 2 * * *", "America/New_York", "2005-04-02", "2005-04-04", []string{
			"2005-04-02 02:00 EST", "2005-04-03 03:00 EDT", "2005-04-04 02:00 EDT"}},
		{"0 2 * * *", "Europe/Berlin", "2099-03-28", "2099-03-30", []string{
			"2099-03-28 02:00 CET", "2099-03-29 03:00 CEST", "2099-03-30 02:00 CEST"}},
		// Weekdays only: the extra action only on a day the cron fires.
		{"0 2 * * 1-5", "Europe/Berlin", "2026-03-27", "2026-03-30", []string{
			"2026-03-27 02:00 CET", "2026-03-30 02:00 CEST"}},
		// Every hour: every real hour, as before.
		{"0 * * * *", "Europe/Berlin", "2026-03-29", "2026-03-29", []string{
			"2026-03-29 00:00 CET", "2026-03-29 01:00 CET", "2026-03-29 03:00 CEST"}},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s %s %s", c.tz, c.cron, c.from), func(t *testing.T) {
			loc, _ := time.LoadLocation(c.tz)
			from, _ := time.ParseInLocation(DateLayout, c.from, loc)
			to, _ := time.ParseInLocation(DateLayout, c.to, loc)
			to = to.Add(4*time.Hour - time.Second)
			if c.cron == "0 * * * *" {
				to = from.Add(3*time.Hour - time.Second)
			}
			got := localTimes(temporalTimes(t, build(t, c.cron, c.tz).Spec, from.Add(-time.Second), to), c.tz)
			if !slices.Equal(got, c.want) {
				t.Errorf("actions\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
		})
	}
}

// Without the adjustment, Temporal skips the gap day and fires twice in
// New York's repeated hour: what the adjustment is for.
func TestDaylightSavingTemporalAlone(t *testing.T) {
	berlin := build(t, "0 2 * * *", "Europe/Berlin").Spec
	berlin.Calendars, berlin.Skip = nil, nil
	loc, _ := time.LoadLocation("Europe/Berlin")
	from := time.Date(2026, 3, 27, 0, 0, 0, 0, loc)
	if got := temporalTimes(t, berlin, from, from.AddDate(0, 0, 4)); len(got) != 3 {
		t.Errorf("Temporal alone, Berlin 2026-03-27..30: %v, want 3 actions (no 03-29)", localTimes(got, "Europe/Berlin"))
	}
	ny := build(t, "0 1 * * *", "America/New_York").Spec
	ny.Calendars, ny.Skip = nil, nil
	nyc, _ := time.LoadLocation("America/New_York")
	from = time.Date(2026, 11, 1, 0, 0, 0, 0, nyc)
	if got := temporalTimes(t, ny, from, from.AddDate(0, 0, 1).Add(-time.Second)); len(got) != 2 {
		t.Errorf("Temporal alone, New York 2026-11-01 01:00: %v, want 2 actions", localTimes(got, "America/New_York"))
	}
}

// Across a whole century, every day of a nightly cron has one action, on
// that day.
func TestDaylightSavingEveryDay(t *testing.T) {
	for _, c := range []struct{ cron, tz string }{
		{"0 2 * * *", "Europe/Berlin"}, {"30 2 * * *", "Europe/Berlin"},
		{"0 2 * * *", "America/New_York"}, {"0 1 * * *", "America/New_York"}, {"15 1 * * *", "America/New_York"},
		{"0 0 * * *", "America/Santiago"}, {"0 2 * * *", "Australia/Sydney"}, {"0 3 * * *", "Europe/London"},
	} {
		loc, _ := time.LoadLocation(c.tz)
		from := time.Date(2000, 1, 1, 0, 0, 0, 0, loc)
		to := time.Date(2100, 12, 31, 0, 0, 0, 0, loc)
		times := temporalTimes(t, build(t, c.cron, c.tz).Spec, from.Add(-time.Second), to.Add(-time.Second))
		perDay := map[string]int{}
		for _, tm := range times {
			perDay[tm.In(loc).Format(DateLayout)]++
		}
		var bad []string
		for d := from; d.Before(to); d = d.AddDate(0, 0, 1) {
			if n := perDay[d.Format(DateLayout)]; n != 1 {
				bad = append(bad, fmt.Sprintf("%s: %d", d.Format(DateLayout), n))
			}
		}
		if len(bad) > 0 {
			t.Errorf("%s %s: days without exactly one action: %v", c.tz, c.cron, bad[:min(len(bad), 10)])
		}
	}
}

func TestDaylightSavingEntries(t *testing.T) {
	adj, err := DaylightSaving("0 2 * * *", "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	// The last Sunday of March falls on one of 7 days: 7 entries, each
	// with its years; no fall-back entries (Berlin's repeated 02:00 fires
	// once).
	if len(adj.Calendars) != 7 || len(adj.Skip) != 0 || len(adj.Days) != 101 {
		t.Errorf("Berlin: %d calendars, %d skips, %d days", len(adj.Calendars), len(adj.Skip), len(adj.Days))
	}
	i := slices.IndexFunc(adj.Days, func(d DSTDay) bool { return d.Date == "2026-03-29" })
	if i < 0 || adj.Days[i].Missed[0] != "02:00" || !adj.Days[i].At.Equal(time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)) {
		t.Errorf("Berlin 2026-03-29: %+v", adj.Days[max(i, 0)])
	}
	ny, _ := DaylightSaving("0 1 * * *", "America/New_York")
	i = slices.IndexFunc(ny.Days, func(d DSTDay) bool { return d.Date == "2026-11-01" })
	if i < 0 || !ny.Days[i].Repeat || !ny.Days[i].At.Equal(time.Date(2026, 11, 1, 7, 0, 0, 0, time.UTC)) || len(ny.Skip) == 0 {
		t.Errorf("New York 2026-11-01: %+v", ny.Days[max(i, 0)])
	}
	for _, c := range []struct{ cron, tz string }{{"0 2 * * *", ""}, {"0 2 * * *", "UTC"}, {"0 * * * *", "Europe/Berlin"},
		{"0 12 * * *", "Europe/Berlin"}, {"@every 1h", "Europe/Berlin"}, {"0 2 * * *", "Asia/Tokyo"}} {
		if adj, err := DaylightSaving(c.cron, c.tz); err != nil || !adj.Empty() || adj.Digest() != "" {
			t.Errorf("%s %q: %+v %v, want nothing", c.tz, c.cron, adj, err)
		}
	}
	// Recorded: a schedule applied before this gets updated once.
	if o := build(t, "0 2 * * *", "Europe/Berlin"); o.Memo[MemoKey].(Record).DaylightSaving == "" || len(o.Spec.Calendars) != 7 {
		t.Errorf("build: record %+v, %d calendars", o.Memo[MemoKey], len(o.Spec.Calendars))
	}
}
