package dags

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Data-triggered schedules. A schedule with `when_ready: true` starts the
// run for a date as soon as that date's data is there, with the cron time
// as the latest start. It does so with the pipeline's own wait_for: the
// Temporal schedule fires at `earliest` on the date (default 00:00, the
// start of the date in the schedule's time zone) instead of at the cron
// time, and the run waits for its conditions as any run does, starting
// its first node the moment they hold. The run is still for the cron
// time (its ${run.logical_time}) and its waits' deadlines count from the
// cron time when that is later than the wait's start, so a run that
// started early waits exactly as long past the cron time as a run that
// started at it would have. A run for a date is one workflow whose id
// holds the date's firing time, so it never starts twice.
//
// Firing at another time of the same day keeps the date's day-of-month,
// month and day-of-week fields as they are: so a when_ready cron fires
// at one fixed time of day ("0 3 * * *", "30 2 * * mon-fri"), and
// earliest is an earlier time of that day.

// DefaultEarliest is when a when_ready schedule starts a date's run when
// it names no earliest: the start of the date.
const DefaultEarliest = "00:00"

// ReadyOverlap is the overlap of a when_ready schedule that names none: a
// run that waits for its date's data must not make the next date's run
// be skipped or queued behind it.
const ReadyOverlap = "allow_all"

var clockRe = regexp.MustCompile(`^([01]?[0-9]|2[0-3]):([0-5][0-9])$`)

// ParseClock reads a wall time "HH:MM" (24-hour).
func ParseClock(s string) (hour, minute int, err error) {
	m := clockRe.FindStringSubmatch(s)
	if m == nil {
		return 0, 0, fmt.Errorf("%q is not a time of day HH:MM (24-hour, such as 00:00 or 01:30)", s)
	}
	hour, _ = strconv.Atoi(m[1])
	minute, _ = strconv.Atoi(m[2])
	return hour, minute, nil
}

// ReadyCron works out a when_ready schedule: fire is the cron the
// Temporal schedule fires on (cron at earliest's time of day), latest
// the cron's own time of day (HH:MM), the runs' latest start.
func ReadyCron(cron, earliest string) (fire, latest string, err error) {
	f := strings.Fields(cron)
	if len(f) != 5 || !isNumber(f[0]) || !isNumber(f[1]) {
		return "", "", fmt.Errorf("when_ready needs a cron that fires once a day at a fixed time, such as \"0 3 * * *\" (minute and hour one number each), got %q", cron)
	}
	h, _ := strconv.Atoi(f[1])
	m, _ := strconv.Atoi(f[0])
	if h > 23 || m > 59 {
		return "", "", fmt.Errorf("invalid cron %q", cron)
	}
	eh, em, err := ParseClock(earliest)
	if err != nil {
		return "", "", fmt.Errorf("earliest: %w", err)
	}
	latest = fmt.Sprintf("%02d:%02d", h, m)
	if eh*60+em >= h*60+m {
		return "", "", fmt.Errorf("earliest %s is not before the cron's time %s: a when_ready run starts between the two, on the same day", earliest, latest)
	}
	return fmt.Sprintf("%d %d %s", em, eh, strings.Join(f[2:], " ")), latest, nil
}

// LatestStart is the latest start of a when_ready run for the date of t:
// that date at the wall time latest (HH:MM) in t's location. A wall time
// a clock change skips is taken after the gap, as time.Date does.
func LatestStart(t time.Time, latest string) (time.Time, error) {
	h, m, err := ParseClock(latest)
	if err != nil {
		return time.Time{}, err
	}
	y, mo, d := t.Date()
	return time.Date(y, mo, d, h, m, 0, 0, t.Location()), nil
}

func isNumber(s string) bool {
	if s == "" || len(s) > 2 {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// whenReady parses a schedule's when_ready and earliest.
func (p *parser) whenReady(m mapping, sc *Schedule, what string) {
	if v := m.get("when_ready"); v != nil {
		sc.ReadyPos = posOf(resolve(v))
		sc.WhenReady, _ = p.bool(v, what+" when_ready")
	}
	v := m.get("earliest")
	if v != nil {
		sc.EarliestPos = posOf(resolve(v))
		if !sc.WhenReady {
			p.errorf(v, "%s: earliest applies to when_ready schedules only", what)
			return
		}
		if s, ok := p.str(v, what+" earliest"); ok {
			if _, _, err := ParseClock(s); err != nil {
				p.errorf(v, "%s: earliest: %v", what, err)
			}
			sc.Earliest = s
		}
	}
	if !sc.WhenReady {
		return
	}
	if sc.Earliest == "" {
		sc.Earliest = DefaultEarliest
	}
	if m.get("overlap") == nil {
		sc.Overlap = ReadyOverlap
	}
}

// whenReady validates a when_ready schedule: a cron at one time of day
// after earliest, and a pipeline with wait_for conditions to wait for.
func (v *validator) whenReady(sc *Schedule, what string) {
	if !sc.WhenReady {
		return
	}
	pos := knownPos(sc.ReadyPos, sc.Pos)
	if len(v.s.WaitFor) == 0 {
		v.at(pos, "%s: when_ready needs the pipeline's own wait_for conditions (the run starts its nodes once they hold), and pipeline %s has none", what, v.s.Name)
	}
	switch {
	case sc.Every > 0:
		v.at(pos, "%s: when_ready needs a cron that fires once a day at a fixed time, not every", what)
	case sc.Cron != "":
		if _, _, err := ReadyCron(sc.Cron, sc.Earliest); err != nil {
			v.at(knownPos(sc.EarliestPos, pos), "%s: %v", what, err)
		}
	}
}
