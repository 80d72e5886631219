package dags

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/retrain-ml/retrain/internal/number"
)

// Date functions of the expression language, for pipelines that run per
// day. A date is a "YYYY-MM-DD" string; a time is an RFC 3339 string (as
// ${run.logical_time} gives). They are pure: no clock, no local time zone,
// so the workflow evaluates them and replays the same.
const (
	dateLayout = "2006-01-02"
	// maxDateRange bounds date_range: ten thousand days is 27 years, more
	// than any backfill, and a list that size is still a small payload.
	maxDateRange = 10000
	// maxDateDays bounds a day offset, so that results stay 4-digit years.
	maxDateDays = 3_000_000
)

// dateFuncs are the date functions by name (see whenFuncs).
func dateFuncs() map[string]WhenFunc {
	return map[string]WhenFunc{
		"date_add":     dateAdd,
		"date_range":   dateRange,
		"date_format":  dateFormat,
		"days_between": daysBetween,
	}
}

// dateValue is a parsed date or time argument.
type dateValue struct {
	t    time.Time
	date bool // written as a date: results are dates too
}

func (d dateValue) String() string {
	if d.date {
		return d.t.Format(dateLayout)
	}
	return d.t.Format(time.RFC3339Nano)
}

// parseDateArg reads a date or an RFC 3339 time. A date is taken as
// midnight UTC, so adding days never meets a daylight saving change.
func parseDateArg(fn string, i int, v any) (dateValue, error) {
	s, ok := v.(string)
	if !ok {
		return dateValue{}, fmt.Errorf("%s: argument %d is %s, not a date (YYYY-MM-DD) or time (RFC 3339)", fn, i, describeValue(v))
	}
	s = strings.TrimSpace(s)
	if t, err := time.Parse(dateLayout, s); err == nil {
		return dateValue{t: t, date: true}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return dateValue{}, fmt.Errorf("%s: argument %d is %q, not a date (YYYY-MM-DD) or time (RFC 3339)", fn, i, truncate(s))
	}
	if y := t.Year(); y < 1 || y > 9999 {
		return dateValue{}, fmt.Errorf("%s: argument %d is %q, outside years 1 to 9999", fn, i, s)
	}
	return dateValue{t: t}, nil
}

// intArgOf reads a whole number: a number, or text holding one (params
// given on the command line arrive as text).
func intArgOf(fn string, i int, v any) (int64, error) {
	if s, ok := v.(string); ok {
		f, err := number.Text(s)
		if err != nil {
			return 0, fmt.Errorf("%s: argument %d is %q, not a whole number", fn, i, truncate(s))
		}
		v = f
	}
	n, ok := toInt64(v)
	if !ok {
		return 0, fmt.Errorf("%s: argument %d is %s, not a whole number", fn, i, describeValue(v))
	}
	return n, nil
}

func wantArgs(fn string, args []any, n int) error {
	if len(args) != n {
		return fmt.Errorf("%s takes %d arguments, got %d", fn, n, len(args))
	}
	return nil
}

// calendarDay is the date a value names, as written (a time's date in its
// own offset), as midnight UTC.
func calendarDay(d dateValue) time.Time {
	y, m, day := d.t.Date()
	return time.Date(y, m, day, 0, 0, 0, 0, time.UTC)
}

// dateAdd is date_add(date_or_time, days): the date (or time) that many
// days later; negative days go back.
func dateAdd(args ...any) (any, error) {
	if err := wantArgs("date_add", args, 2); err != nil {
		return nil, err
	}
	d, err := parseDateArg("date_add", 1, args[0])
	if err != nil {
		return nil, err
	}
	n, err := intArgOf("date_add", 2, args[1])
	if err != nil {
		return nil, err
	}
	if n < -maxDateDays || n > maxDateDays {
		return nil, fmt.Errorf("date_add: %d days is out of range", n)
	}
	d.t = d.t.AddDate(0, 0, int(n))
	if y := d.t.Year(); y < 1 || y > 9999 {
		return nil, fmt.Errorf("date_add: the result is outside years 1 to 9999")
	}
	return d.String(), nil
}

// dateRange is date_range(from, to): the dates from the first to the
// last, both included, as a list of "YYYY-MM-DD" strings.
func dateRange(args ...any) (any, error) {
	if err := wantArgs("date_range", args, 2); err != nil {
		return nil, err
	}
	from, err := parseDateArg("date_range", 1, args[0])
	if err != nil {
		return nil, err
	}
	to, err := parseDateArg("date_range", 2, args[1])
	if err != nil {
		return nil, err
	}
	a, b := calendarDay(from), calendarDay(to)
	if b.Before(a) {
		return nil, fmt.Errorf("date_range: %s is after %s", a.Format(dateLayout), b.Format(dateLayout))
	}
	days := dayDiff(a, b)
	if days >= maxDateRange {
		return nil, fmt.Errorf("date_range: %s to %s is %d days; the limit is %d", a.Format(dateLayout), b.Format(dateLayout), days+1, maxDateRange)
	}
	out := make([]any, 0, days+1)
	for d := a; !d.After(b); d = d.AddDate(0, 0, 1) {
		out = append(out, d.Format(dateLayout))
	}
	return out, nil
}

// daysBetween is days_between(a, b): the days from a's date to b's date,
// negative when b is earlier. A time counts by its date as written.
func daysBetween(args ...any) (any, error) {
	if err := wantArgs("days_between", args, 2); err != nil {
		return nil, err
	}
	a, err := parseDateArg("days_between", 1, args[0])
	if err != nil {
		return nil, err
	}
	b, err := parseDateArg("days_between", 2, args[1])
	if err != nil {
		return nil, err
	}
	return int(dayDiff(calendarDay(a), calendarDay(b))), nil
}

// dayDiff counts the days between two midnights UTC. Unix seconds, not
// Sub: a Duration saturates at 292 years.
func dayDiff(a, b time.Time) int64 { return (b.Unix() - a.Unix()) / 86400 }

// dateFormat is date_format(date_or_time, layout), the layout in strftime
// directives: %Y year, %m month, %d day, %H hour, %M minute, %S second,
// %y two-digit year, %j day of the year, %e day space-padded, %b/%B month
// name, %a/%A weekday name, %u weekday 1 (Monday) to 7, %V ISO week, %G
// ISO week's year, %F %Y-%m-%d, %T %H:%M:%S, %z offset (+0100), %Z zone
// name, %s Unix seconds, %% a "%". Anything else is an error.
func dateFormat(args ...any) (any, error) {
	if err := wantArgs("date_format", args, 2); err != nil {
		return nil, err
	}
	d, err := parseDateArg("date_format", 1, args[0])
	if err != nil {
		return nil, err
	}
	layout, ok := args[1].(string)
	if !ok {
		return nil, fmt.Errorf("date_format: argument 2 is %s, not a layout string such as \"%%Y/%%m/%%d\"", describeValue(args[1]))
	}
	return strftime(d.t, layout)
}

func strftime(t time.Time, layout string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(layout); i++ {
		c := layout[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+1 >= len(layout) {
			return "", fmt.Errorf("date_format: layout %q ends in a lone %%; write %%%% for a %%", truncate(layout))
		}
		i++
		switch layout[i] {
		case 'Y':
			fmt.Fprintf(&b, "%04d", t.Year())
		case 'y':
			fmt.Fprintf(&b, "%02d", t.Year()%100)
		case 'm':
			fmt.Fprintf(&b, "%02d", int(t.Month()))
		case 'd':
			fmt.Fprintf(&b, "%02d", t.Day())
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		case 'H':
			fmt.Fprintf(&b, "%02d", t.Hour())
		case 'M':
			fmt.Fprintf(&b, "%02d", t.Minute())
		case 'S':
			fmt.Fprintf(&b, "%02d", t.Second())
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case 'b':
			b.WriteString(t.Month().String()[:3])
		case 'B':
			b.WriteString(t.Month().String())
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'u':
			b.WriteString(strconv.Itoa((int(t.Weekday())+6)%7 + 1))
		case 'V':
			_, w := t.ISOWeek()
			fmt.Fprintf(&b, "%02d", w)
		case 'G':
			y, _ := t.ISOWeek()
			fmt.Fprintf(&b, "%04d", y)
		case 'F':
			b.WriteString(t.Format(dateLayout))
		case 'T':
			b.WriteString(t.Format("15:04:05"))
		case 'z':
			b.WriteString(t.Format("-0700"))
		case 'Z':
			b.WriteString(t.Format("MST"))
		case 's':
			b.WriteString(strconv.FormatInt(t.Unix(), 10))
		case '%':
			b.WriteByte('%')
		default:
			return "", fmt.Errorf("date_format: unknown directive %%%c in %q; see the README for the directives", layout[i], truncate(layout))
		}
	}
	return b.String(), nil
}
