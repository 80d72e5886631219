package dags

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"gopkg.in/yaml.v3"
)

// Schedule is an entry of a spec's schedules: a cadence that starts runs
// of the pipeline, each with its own logical time (the schedule's nominal
// action time). The schedules package turns it into a Temporal Schedule.
type Schedule struct {
	ID string
	// Exactly one of Cron and Every is set.
	Cron  string        // a cron expression (5 fields, or @daily and the like)
	Every time.Duration // or a fixed interval
	// Timezone is an IANA zone name in which Cron fires and the logical
	// date is taken; empty means UTC.
	Timezone string
	// Params are literal values for the spec's params, merged over their
	// defaults in every run the schedule starts.
	Params map[string]any
	// CatchupWindow is how late a missed action (the server was down) may
	// still run; nil: Temporal's default (a year).
	CatchupWindow *time.Duration
	// Overlap says what happens when an action comes due while a run it
	// started is still going; one of Overlaps, default "skip".
	Overlap string
	// PauseOnFailure pauses the schedule after a run it started fails.
	PauseOnFailure bool
	// Jitter delays each action by a random amount up to this much.
	Jitter time.Duration
	// Paused creates (or, on a change, updates) the schedule paused.
	Paused bool
	// WhenReady starts each run early, at Earliest on its date, to wait
	// for its date's wait_for conditions; the cron time is its latest
	// start (schedule_ready.go). Earliest is a wall time HH:MM in
	// Timezone, "00:00" unless given; empty without WhenReady.
	WhenReady bool
	Earliest  string

	Pos         Pos // the entry's mapping
	IDPos       Pos
	ParamsPos   Pos            // the params key; zero if absent
	ParamKeyPos map[string]Pos // each params key
	ReadyPos    Pos            // the when_ready value; zero if absent
	EarliestPos Pos            // the earliest value; zero if absent
}

// Overlaps are the overlap policies a schedule may name, after Temporal's
// ScheduleOverlapPolicy.
var Overlaps = []string{"skip", "buffer_one", "buffer_all", "cancel_other", "terminate_other", "allow_all"}

// DefaultOverlap is the policy of a schedule that names none: a run still
// going when the next comes due makes that one be skipped.
const DefaultOverlap = "skip"

var scheduleFields = []string{"id", "cron", "every", "timezone", "params", "catchup_window", "overlap", "pause_on_failure", "jitter", "paused", "when_ready", "earliest"}

// cronParser accepts what Temporal's cron strings accept in the common
// case: five fields (minute hour day-of-month month day-of-week, with
// names, ranges, lists and steps) or a descriptor (@daily, @every 1h).
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Schedule returns the schedule with the given id, or nil.
func (s *Spec) Schedule(id string) *Schedule {
	for _, sc := range s.Schedules {
		if sc.ID == id {
			return sc
		}
	}
	return nil
}

// schedules parses the spec's schedules list.
func (p *parser) schedules(n *yaml.Node) []*Schedule {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "schedules must be a list, got %s", kind(n))
		return nil
	}
	var out []*Schedule
	for i, item := range n.Content {
		if sc := p.schedule(item, i); sc != nil {
			out = append(out, sc)
		}
	}
	return out
}

func (p *parser) schedule(n *yaml.Node, index int) *Schedule {
	n = resolve(n)
	what := fmt.Sprintf("schedules entry #%d", index+1)
	if id := peekID(n); id != "" {
		what = fmt.Sprintf("schedule %q", id)
	}
	m, ok := p.mapping(n, what)
	if !ok {
		return nil
	}
	sc := &Schedule{Pos: posOf(n), Overlap: DefaultOverlap}
	p.unknown(m, "in "+what, scheduleFields, nil)
	if v := m.get("id"); v != nil {
		sc.IDPos = posOf(resolve(v))
		if id, ok := p.str(v, what+" id"); ok {
			sc.ID = id
			if !idRe.MatchString(id) {
				p.errorf(v, "invalid schedule id %q: use letters, digits, '_' and '-', starting with a letter", id)
			}
		}
	} else {
		p.errorf(n, "%s: missing required field \"id\"", what)
	}
	cronNode, everyNode := m.get("cron"), m.get("every")
	switch {
	case cronNode != nil && everyNode != nil:
		p.errorf(everyNode, "%s: set one of cron and every, not both", what)
	case cronNode == nil && everyNode == nil:
		p.errorf(n, "%s: missing \"cron\" or \"every\" (when the schedule fires)", what)
	case cronNode != nil:
		if c, ok := p.str(cronNode, what+" cron"); ok {
			if err := checkCron(c); err != nil {
				p.errorf(cronNode, "%s: invalid cron %q: %v", what, c, err)
			} else {
				sc.Cron = strings.TrimSpace(c)
			}
		}
	default:
		if d, ok := p.duration(everyNode, what+" every"); ok {
			if d < time.Second {
				p.errorf(everyNode, "%s: every must be at least 1s, got %s", what, d)
			} else {
				sc.Every = d
			}
		}
	}
	if v := m.get("timezone"); v != nil {
		if tz, ok := p.str(v, what+" timezone"); ok {
			// Local would mean the zone of whichever machine reads it.
			if err := CheckTimezone(tz); err != nil {
				p.errorf(v, "%s: %v", what, err)
			} else {
				sc.Timezone = tz
			}
		}
	}
	if v := m.opt("params"); v != nil {
		sc.ParamsPos = m.keyPos("params")
		sc.Params, sc.ParamKeyPos = p.with(v, what+" params")
		if sc.Params == nil {
			sc.Params = map[string]any{}
		}
	}
	if v := m.get("catchup_window"); v != nil {
		if d, ok := p.duration(v, what+" catchup_window"); ok {
			if d < 10*time.Second {
				// Temporal's own floor.
				p.errorf(v, "%s: catchup_window must be at least 10s, got %s", what, d)
			} else {
				sc.CatchupWindow = &d
			}
		}
	}
	if v := m.get("overlap"); v != nil {
		if o, ok := p.str(v, what+" overlap"); ok {
			if slices.Contains(Overlaps, o) {
				sc.Overlap = o
			} else {
				p.errorf(v, "%s: unknown overlap %q; use one of %s%s", what, o, strings.Join(Overlaps, ", "), didYouMean(o, Overlaps))
			}
		}
	}
	if v := m.get("pause_on_failure"); v != nil {
		sc.PauseOnFailure, _ = p.bool(v, what+" pause_on_failure")
	}
	if v := m.get("jitter"); v != nil {
		sc.Jitter, _ = p.duration(v, what+" jitter")
	}
	if v := m.get("paused"); v != nil {
		sc.Paused, _ = p.bool(v, what+" paused")
	}
	p.whenReady(m, sc, what) // schedule_ready.go
	return sc
}

// checkCron reports whether Temporal will take c. Time zones belong in the
// timezone field, where they are checked and apply to the logical date too.
func checkCron(c string) error {
	c = strings.TrimSpace(c)
	if strings.HasPrefix(c, "TZ=") || strings.HasPrefix(c, "CRON_TZ=") {
		return fmt.Errorf("set the time zone with the schedule's timezone field")
	}
	if c == "" {
		return fmt.Errorf("empty")
	}
	_, err := cronParser.Parse(c)
	return err
}

// schedules validates the spec's schedules: unique ids, and params that
// the spec declares, of their declared types.
func (v *validator) schedules() {
	first := map[string]*Schedule{}
	for _, sc := range v.s.Schedules {
		what := fmt.Sprintf("schedule %q", sc.ID)
		pos := knownPos(sc.IDPos, sc.Pos)
		if sc.ID == "" {
			v.at(sc.Pos, "schedule: missing required field \"id\"")
		} else if f, dup := first[sc.ID]; dup {
			v.at(pos, "duplicate schedule id %q, also at line %d", sc.ID, f.Pos.Line)
		} else {
			first[sc.ID] = sc
		}
		if sc.Cron == "" && sc.Every == 0 {
			v.at(sc.Pos, "%s: missing \"cron\" or \"every\" (when the schedule fires)", what)
		}
		v.whenReady(sc, what) // schedule_ready.go
		names := make([]string, len(v.s.Params))
		for i, p := range v.s.Params {
			names[i] = p.Name
		}
		for _, key := range slices.Sorted(maps.Keys(sc.Params)) {
			at := knownPos(sc.ParamKeyPos[key], sc.ParamsPos, sc.Pos)
			prm := v.s.Param(key)
			if prm == nil {
				v.at(at, "%s sets param %q, which the spec does not declare%s", what, key, didYouMean(key, names))
				continue
			}
			c, err := coerceParam(prm.Type, sc.Params[key])
			if err != nil {
				v.at(at, "%s: param %q: %v", what, key, err)
				continue
			}
			// Each run evaluates run values in the param, e.g.
			// ${date_add(run.logical_date, -1)}; nothing else is known then.
			if err := checkParamRefs(key, c); err != nil {
				v.at(at, "%s: %v", what, err)
			}
		}
	}
}

// knownPos returns the first known position.
func knownPos(ps ...Pos) Pos {
	for _, p := range ps {
		if p != (Pos{}) {
			return p
		}
	}
	return Pos{}
}
