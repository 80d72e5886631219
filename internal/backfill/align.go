// Package backfill is the pure logic of retrain's two-stage feature
// backfill: how feature rows are aligned to training rows in time (same
// day, previous day, or as of the event time), the hash join that attaches
// them, how buckets are grouped for the promotion fan-out, and the checks
// that refuse bad input before anything is written. It reads and writes
// nothing; package features runs it against the lake.
package backfill

import (
	"fmt"
	"time"
)

// Alignment says which feature row of an entity a training row gets.
type Alignment string

const (
	// SameDay joins the feature row of the training row's date. For daily
	// aggregates computed over that same day this leaks the future: use it
	// only for features known at the start of the day.
	SameDay Alignment = "same_day"
	// PreviousDay joins the feature row of the day before the training
	// row's date: what a model serving on that day would have had.
	PreviousDay Alignment = "previous_day"
	// AsOf joins the latest feature row whose timestamp is at or before
	// the training row's event time: a point-in-time join.
	AsOf Alignment = "as_of"
)

// Alignments lists the strategies, for messages and docs.
var Alignments = []Alignment{SameDay, PreviousDay, AsOf}

// ParseAlignment validates an alignment name.
func ParseAlignment(s string) (Alignment, error) {
	for _, a := range Alignments {
		if string(a) == s {
			return a, nil
		}
	}
	return "", fmt.Errorf("unknown alignment %q: want same_day, previous_day or as_of", s)
}

// UsesDate reports whether the alignment matches on the date column
// (rather than on timestamps).
func (a Alignment) UsesDate() bool { return a == SameDay || a == PreviousDay }

// Day is a calendar date as days since 1970-01-01, Iceberg's date.
type Day int32

// MicrosPerDay is the length of a day in Iceberg timestamp units.
const MicrosPerDay = int64(24 * time.Hour / time.Microsecond)

// ParseDay parses YYYY-MM-DD.
func ParseDay(s string) (Day, error) {
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return 0, fmt.Errorf("date %q: want YYYY-MM-DD", s)
	}
	return DayOf(t), nil
}

// DayOf is the UTC date of t.
func DayOf(t time.Time) Day {
	return Day(t.UTC().Unix() / 86400)
}

// Time is midnight UTC at the start of d.
func (d Day) Time() time.Time { return time.Unix(int64(d)*86400, 0).UTC() }

// Micros is midnight UTC at the start of d in microseconds since the epoch.
func (d Day) Micros() int64 { return int64(d) * MicrosPerDay }

func (d Day) String() string { return d.Time().Format(time.DateOnly) }

// DateRange is an inclusive range of days.
type DateRange struct {
	Start, End Day
}

// ParseDateRange parses and validates an inclusive range.
func ParseDateRange(start, end string) (DateRange, error) {
	s, err := ParseDay(start)
	if err != nil {
		return DateRange{}, fmt.Errorf("start_date: %w", err)
	}
	e, err := ParseDay(end)
	if err != nil {
		return DateRange{}, fmt.Errorf("end_date: %w", err)
	}
	r := DateRange{Start: s, End: e}
	return r, r.Validate()
}

// Validate refuses an empty range.
func (r DateRange) Validate() error {
	if r.End < r.Start {
		return fmt.Errorf("empty date range %s..%s: end_date is before start_date", r.Start, r.End)
	}
	return nil
}

// Days is the number of days in the range.
func (r DateRange) Days() int { return int(r.End-r.Start) + 1 }

// Contains reports whether d is in the range, both ends included.
func (r DateRange) Contains(d Day) bool { return d >= r.Start && d <= r.End }

func (r DateRange) String() string { return fmt.Sprintf("%s..%s", r.Start, r.End) }

// FeatureWindow is the span of feature rows that training rows of day d
// may join, as an inclusive range of feature dates (for SameDay and
// PreviousDay) or of feature timestamps in microseconds (for AsOf, which
// looks back lookbackDays before d and never past the end of d: a row
// stamped later than every event of the day can never be joined).
type FeatureWindow struct {
	FromDay, ToDay       Day
	FromMicros, ToMicros int64
}

// Window returns the feature rows training rows of day d may need.
func (a Alignment) Window(d Day, lookbackDays int) FeatureWindow {
	return a.WindowIn(d, lookbackDays, time.UTC)
}

// WindowIn is Window for days in loc: AsOf's span runs from midnight in
// loc lookbackDays before d to the end of d in loc (a split of files whose
// days are a time zone's).
func (a Alignment) WindowIn(d Day, lookbackDays int, loc *time.Location) FeatureWindow {
	switch a {
	case SameDay:
		return FeatureWindow{FromDay: d, ToDay: d}
	case PreviousDay:
		return FeatureWindow{FromDay: d - 1, ToDay: d - 1}
	default:
		return FeatureWindow{
			FromMicros: (d - Day(lookbackDays)).MicrosIn(loc),
			ToMicros:   (d + 1).MicrosIn(loc) - 1,
		}
	}
}

// MicrosIn is midnight in loc at the start of d, in microseconds since
// the epoch.
func (d Day) MicrosIn(loc *time.Location) int64 {
	if loc == time.UTC {
		return d.Micros()
	}
	y, m, dd := d.Time().Date()
	return time.Date(y, m, dd, 0, 0, 0, 0, loc).UnixMicro()
}
