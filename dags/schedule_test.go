package dags

import (
	"strings"
	"testing"
	"time"
)

const scheduleSpec = `name: x
params:
  start_date: {type: string, default: "2026-01-01"}
  epochs: {type: int, default: 2}
schedules:
  - id: daily
    cron: "0 3 * * *"
    timezone: Europe/Paris
    params: {start_date: "2026-02-01", epochs: 3}
    catchup_window: 1d
    overlap: buffer_one
    pause_on_failure: true
    jitter: 5m
  - id: hourly
    every: 1h
    paused: true
nodes:
  - id: a
    type: noop
`

func TestParseSchedules(t *testing.T) {
	s := mustParse(t, scheduleSpec)
	if err := s.Validate(testRegistry(t)); err != nil {
		t.Fatal(err)
	}
	if len(s.Schedules) != 2 {
		t.Fatalf("got %d schedules", len(s.Schedules))
	}
	d := s.Schedule("daily")
	if d == nil || d.Cron != "0 3 * * *" || d.Timezone != "Europe/Paris" || d.Overlap != "buffer_one" ||
		!d.PauseOnFailure || d.Jitter != 5*time.Minute || d.CatchupWindow == nil || *d.CatchupWindow != 24*time.Hour || d.Paused {
		t.Errorf("daily: %+v", d)
	}
	if d.Params["start_date"] != "2026-02-01" || d.Params["epochs"] != 3 {
		t.Errorf("daily params: %v", d.Params)
	}
	if d.Pos.Line != 6 || d.ParamKeyPos["epochs"].Line != 9 {
		t.Errorf("positions: %+v %+v", d.Pos, d.ParamKeyPos)
	}
	h := s.Schedule("hourly")
	if h == nil || h.Every != time.Hour || h.Cron != "" || h.Overlap != DefaultOverlap || !h.Paused || h.CatchupWindow != nil {
		t.Errorf("hourly: %+v", h)
	}
	if s.SchedulesPos.Line != 5 {
		t.Errorf("SchedulesPos %+v", s.SchedulesPos)
	}
}

func TestScheduleCronForms(t *testing.T) {
	for _, c := range []string{"@daily", "@every 6h", "*/15 * * * *", "0 0 1 jan,jul *", "30 2 * * mon-fri"} {
		if err := checkCron(c); err != nil {
			t.Errorf("%q: %v", c, err)
		}
	}
}

func TestScheduleErrors(t *testing.T) {
	head := "name: x\nparams:\n  date: {type: string, default: \"2026-01-01\"}\n  n: {type: int, default: 1}\nschedules:\n"
	tail := "nodes:\n  - id: a\n    type: noop\n"
	for _, tc := range []errorCase{
		{"bad cron", "  - id: s\n    cron: \"61 * * * *\"\n", `invalid cron "61 * * * *"`, 7},
		{"cron fields", "  - id: s\n    cron: \"* * *\"\n", "invalid cron", 7},
		{"cron tz prefix", "  - id: s\n    cron: \"CRON_TZ=UTC 0 0 * * *\"\n", "timezone field", 7},
		{"unknown tz", "  - id: s\n    cron: \"@daily\"\n    timezone: Mars/Olympus\n", `unknown time zone "Mars/Olympus"`, 8},
		{"both", "  - id: s\n    cron: \"@daily\"\n    every: 1h\n", "set one of cron and every, not both", 8},
		{"neither", "  - id: s\n    paused: true\n", `missing "cron" or "every"`, 6},
		{"bad every", "  - id: s\n    every: soon\n", "every", 7},
		{"unknown overlap", "  - id: s\n    every: 1h\n    overlap: skipp\n", `unknown overlap "skipp"; use one of skip, buffer_one, buffer_all, cancel_other, terminate_other, allow_all (did you mean "skip"?)`, 8},
		{"unknown field", "  - id: s\n    every: 1h\n    cronn: x\n", `unknown field "cronn" in schedule "s"`, 8},
		{"missing id", "  - every: 1h\n", `missing required field "id"`, 6},
		{"bad id", "  - id: 1s\n    every: 1h\n", `invalid schedule id "1s"`, 6},
		{"not a list", "  id: s\n", "schedules must be a list", 6},
		{"short catchup", "  - id: s\n    every: 1h\n    catchup_window: 1s\n", "catchup_window must be at least 10s", 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("test.yaml", []byte(head+tc.src+tail))
			checkError(t, err, tc.want, tc.line)
		})
	}
}

func TestScheduleValidateErrors(t *testing.T) {
	head := "name: x\nparams:\n  date: {type: string, default: \"2026-01-01\"}\n  n: {type: int, default: 1}\nschedules:\n"
	tail := "nodes:\n  - id: a\n    type: noop\n"
	for _, tc := range []errorCase{
		{"undeclared param", "  - id: s\n    every: 1h\n    params: {dat: \"2026-01-02\"}\n", `schedule "s" sets param "dat", which the spec does not declare (did you mean "date"?)`, 8},
		{"wrong type", "  - id: s\n    every: 1h\n    params:\n      n: many\n", `schedule "s": param "n": want an integer, got "many"`, 9},
		{"duplicate id", "  - id: s\n    every: 1h\n  - id: s\n    every: 2h\n", `duplicate schedule id "s", also at line 6`, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := mustParse(t, head+tc.src+tail)
			checkError(t, s.Validate(testRegistry(t)), tc.want, tc.line)
		})
	}
}

// TestScheduleParamsRunValues: a schedule's param may hold run values and
// date functions, evaluated by each run; a reference to a param or a node
// is refused at validation, with its line.
func TestScheduleParamsRunValues(t *testing.T) {
	spec := func(end string) string {
		return `name: p
params:
  end_date: {type: string, default: "2026-11-04"}
schedules:
  - id: daily
    cron: "0 3 * * *"
    params:
      end_date: ` + end + `
nodes:
  - {id: a, type: noop}
`
	}
	if _, err := Load("p.yaml", []byte(spec("${date_add(run.logical_date, -1)}")), testRegistry(t)); err != nil {
		t.Fatalf("run values in a schedule param: %v", err)
	}
	_, err := Load("p.yaml", []byte(spec("${nodes.a.outputs.x}")), testRegistry(t))
	if err == nil || !strings.Contains(err.Error(), `p.yaml:8:7: schedule "daily": param "end_date": ${nodes.a.outputs.x}: a param's value may use run values`) {
		t.Errorf("a node output in a schedule param: %v", err)
	}
}
