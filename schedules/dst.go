package schedules

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/robfig/cron/v3"
	"go.temporal.io/sdk/client"
)

// Daylight saving. Temporal interprets a cron in the schedule's time zone
// wall clock by wall clock, and so:
//   - a time that a spring-forward change skips (02:00 in Europe/Berlin on
//     2026-03-29, America/New_York on 2026-03-08) never fires: that day has
//     no action at all;
//   - a time that a fall-back change repeats fires once in zones east of
//     UTC (the second occurrence) but twice in zones west of it (01:00 in
//     New York on 2026-11-01 fires at 01:00 EDT and 01:00 EST): Temporal
//     takes the instant Go's time.Date picks for the wall time, and when
//     that is the first occurrence it tries the hour again an hour later.
//
// A retrain that processes one day per run must run once a day whatever
// the clock does, so a cron with fixed hours (as Vixie cron does for
// them; one whose hour is * runs every real hour and is left alone) gets,
// in the schedule's spec:
//   - for each day on which a change skips a time it fires at, a calendar
//     entry at the first valid instant after the gap (03:00 CEST in Berlin,
//     03:00 EDT in New York): one action that day, whose nominal time, and
//     so logical date, is on that day;
//   - for each day on which a change repeats a time it fires at and
//     Temporal would fire twice, an exclusion of that wall time that day
//     and a calendar entry at the first instant after the repeated hour
//     (02:00 EST in New York): one action.
//
// The entries are computed from the time zone database for the years
// Temporal's calendars cover (dstFirstYear..dstLastYear), so backfills of
// past years get them too, and grouped by day and time (the years as a
// list), a few entries per zone. Where the compensating instant is also a
// time the cron fires at, the two are one action.

// Temporal's calendars match years 2000 to 2100.
const (
	dstFirstYear = 2000
	dstLastYear  = 2100
)

// dstCronParser reads a cron as dags validates it.
var dstCronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// DSTAdjust is what a cron schedule needs on the days a clock change skips
// or repeats a time it fires at.
type DSTAdjust struct {
	Calendars []client.ScheduleCalendarSpec // one more action on those days
	Skip      []client.ScheduleCalendarSpec // the repeated times Temporal would fire twice
	Days      []DSTDay                      // each adjusted day, in order
}

// DSTDay is one adjusted day.
type DSTDay struct {
	Date   string    // YYYY-MM-DD, the logical date of its run
	Missed []string  // the cron's wall times (HH:MM) that the change skips or repeats
	At     time.Time // the compensating action's instant
	Repeat bool      // a fall-back day (else spring forward)
}

// Empty reports whether nothing needs adjusting.
func (a DSTAdjust) Empty() bool { return len(a.Calendars) == 0 && len(a.Skip) == 0 }

// Digest names the adjustment, for the schedule's record: it changes when
// the time zone database does.
func (a DSTAdjust) Digest() string {
	if a.Empty() {
		return ""
	}
	b, _ := json.Marshal([]any{a.Calendars, a.Skip})
	sum := sha256.Sum256(b)
	return fmt.Sprintf("%d days, %s", len(a.Days), hex.EncodeToString(sum[:6]))
}

// DaylightSaving returns the adjustment a cron in the time zone tz needs
// (none for UTC, for a zone without changes, for @every, and for a cron
// whose hour is *).
func DaylightSaving(cronExpr, tz string) (DSTAdjust, error) {
	if tz == "" || tz == "UTC" {
		return DSTAdjust{}, nil
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return DSTAdjust{}, fmt.Errorf("time zone %q: %w", tz, err)
	}
	sched, err := dstCronParser.Parse(cronExpr)
	if err != nil {
		return DSTAdjust{}, fmt.Errorf("cron %q: %w", cronExpr, err)
	}
	spec, ok := sched.(*cron.SpecSchedule)
	if !ok || allHours(spec) {
		return DSTAdjust{}, nil
	}
	var days []DSTDay
	var add, skip []wallTime
	end := time.Date(dstLastYear+1, 1, 1, 0, 0, 0, 0, time.UTC)
	for t := time.Date(dstFirstYear, 1, 1, 0, 0, 0, 0, time.UTC); t.Before(end); {
		_, zoneEnd := t.In(loc).ZoneBounds()
		if zoneEnd.IsZero() || !zoneEnd.Before(end) {
			break
		}
		if !zoneEnd.After(t) {
			// Go's zone bounds past the table's last transition can end
			// where they start at a year's end (2040-12-31 in Berlin):
			// step over.
			t = t.Add(24 * time.Hour)
			continue
		}
		t = zoneEnd
		_, before := zoneEnd.Add(-time.Second).In(loc).Zone()
		_, after := zoneEnd.In(loc).Zone()
		shift := time.Duration(after-before) * time.Second
		switch {
		case shift > 0: // spring forward: wall times [T+before, T+after) do not exist
			from := wallOf(zoneEnd, before)
			missed := cronTimes(spec, from, from.Add(shift))
			if len(missed) == 0 {
				continue
			}
			at := zoneEnd
			add = append(add, wallOf(at, after))
			days = append(days, DSTDay{Date: at.In(loc).Format(DateLayout), Missed: missed, At: at})
		case shift < 0: // fall back: wall times [T+after, T+before) occur twice
			from := wallOf(zoneEnd, after)
			var twice []string
			for _, w := range cronWalls(spec, from, from.Add(-shift)) {
				first := w.Add(-time.Duration(before) * time.Second) // the instant of its first occurrence
				if !time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), 0, 0, loc).Equal(first) {
					continue // Temporal takes the second occurrence only: one action
				}
				skip = append(skip, w)
				twice = append(twice, w.Format("15:04"))
			}
			if len(twice) == 0 {
				continue
			}
			at := zoneEnd.Add(-shift) // the first instant after the repeated hour
			add = append(add, wallOf(at, after))
			days = append(days, DSTDay{Date: at.In(loc).Format(DateLayout), Missed: twice, At: at, Repeat: true})
		}
	}
	return DSTAdjust{Calendars: calendars(add), Skip: calendars(skip), Days: days}, nil
}

// wallTime is a wall clock reading, held as a UTC time.
type wallTime = time.Time

// wallOf is the wall clock of t at the UTC offset off (seconds).
func wallOf(t time.Time, off int) wallTime {
	return t.UTC().Add(time.Duration(off) * time.Second).Truncate(time.Minute)
}

// cronWalls lists the wall times in [from, to) the cron fires at, with
// Temporal's reading of day of month and day of week (both must match).
func cronWalls(s *cron.SpecSchedule, from, to wallTime) []wallTime {
	var out []wallTime
	for w := from; w.Before(to); w = w.Add(time.Minute) {
		if bit(s.Minute, w.Minute()) && bit(s.Hour, w.Hour()) && bit(s.Dom, w.Day()) &&
			bit(s.Month, int(w.Month())) && bit(s.Dow, int(w.Weekday())) {
			out = append(out, w)
		}
	}
	return out
}

func cronTimes(s *cron.SpecSchedule, from, to wallTime) []string {
	var out []string
	for _, w := range cronWalls(s, from, to) {
		out = append(out, w.Format("15:04"))
	}
	return out
}

func bit(field uint64, v int) bool { return field&(1<<uint(v)) != 0 }

// allHours reports whether the cron's hour field is every hour.
func allHours(s *cron.SpecSchedule) bool {
	for h := range 24 {
		if !bit(s.Hour, h) {
			return false
		}
	}
	return true
}

// calendars turns wall times into calendar entries: one per month, day,
// hour and minute, with the years that have it.
func calendars(walls []wallTime) []client.ScheduleCalendarSpec {
	type key struct{ month, day, hour, minute int }
	years := map[key][]int{}
	var keys []key
	for _, w := range walls {
		k := key{int(w.Month()), w.Day(), w.Hour(), w.Minute()}
		if _, ok := years[k]; !ok {
			keys = append(keys, k)
		}
		years[k] = append(years[k], w.Year())
	}
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(cmp.Compare(a.month, b.month), cmp.Compare(a.day, b.day), cmp.Compare(a.hour, b.hour), cmp.Compare(a.minute, b.minute))
	})
	var out []client.ScheduleCalendarSpec
	for _, k := range keys {
		out = append(out, client.ScheduleCalendarSpec{
			Second:     []client.ScheduleRange{{Start: 0}},
			Minute:     []client.ScheduleRange{{Start: k.minute}},
			Hour:       []client.ScheduleRange{{Start: k.hour}},
			DayOfMonth: []client.ScheduleRange{{Start: k.day}},
			Month:      []client.ScheduleRange{{Start: k.month}},
			Year:       yearRanges(years[k]),
			DayOfWeek:  []client.ScheduleRange{{Start: 0, End: 6}},
			Comment:    "retrain: daylight saving",
		})
	}
	return out
}

// yearRanges writes sorted years as ranges, runs of consecutive years as
// one.
func yearRanges(ys []int) []client.ScheduleRange {
	slices.Sort(ys)
	ys = slices.Compact(ys)
	var out []client.ScheduleRange
	for i := 0; i < len(ys); {
		j := i
		for j+1 < len(ys) && ys[j+1] == ys[j]+1 {
			j++
		}
		r := client.ScheduleRange{Start: ys[i]}
		if j > i {
			r.End = ys[j]
		}
		out = append(out, r)
		i = j + 1
	}
	return out
}
