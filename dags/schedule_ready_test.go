package dags

import (
	"strings"
	"testing"
	"time"
)

const readySpec = `name: x
wait_for:
  - {files: "/data/${run.logical_date}/*.csv", deadline: 6h}
schedules:
  - id: daily
    cron: "0 3 * * *"
    timezone: Europe/Paris
    when_ready: true
  - id: weekdays
    cron: "30 2 * * mon-fri"
    when_ready: true
    earliest: "01:15"
    overlap: buffer_all
  - id: plain
    cron: "0 3 * * *"
nodes:
  - {id: a, type: noop}
`

func TestParseWhenReady(t *testing.T) {
	s := mustParse(t, readySpec)
	if err := s.Validate(testRegistry(t)); err != nil {
		t.Fatal(err)
	}
	d, w, p := s.Schedule("daily"), s.Schedule("weekdays"), s.Schedule("plain")
	if !d.WhenReady || d.Earliest != DefaultEarliest || d.Overlap != ReadyOverlap || d.ReadyPos.Line != 8 {
		t.Errorf("daily: %+v", d)
	}
	if !w.WhenReady || w.Earliest != "01:15" || w.Overlap != "buffer_all" || w.EarliestPos.Line != 12 {
		t.Errorf("weekdays: %+v", w)
	}
	if p.WhenReady || p.Earliest != "" || p.Overlap != DefaultOverlap {
		t.Errorf("plain: %+v", p)
	}
}

func TestReadyCron(t *testing.T) {
	for _, tc := range []struct{ cron, earliest, fire, latest, err string }{
		{"0 3 * * *", "00:00", "0 0 * * *", "03:00", ""},
		{"30 2 * * mon-fri", "01:15", "15 1 * * mon-fri", "02:30", ""},
		{" 5 23 1 jan,jul * ", "7:05", "5 7 1 jan,jul *", "23:05", ""},
		{"0 3 * * *", "03:00", "", "", "earliest 03:00 is not before the cron's time 03:00"},
		{"0 3 * * *", "04:00", "", "", "not before"},
		{"0 3 * * *", "3am", "", "", `earliest: "3am" is not a time of day HH:MM`},
		{"0 3 * * *", "24:00", "", "", "not a time of day"},
		{"0 */6 * * *", "00:00", "", "", "fires once a day at a fixed time"},
		{"0 3,15 * * *", "00:00", "", "", "fires once a day at a fixed time"},
		{"@daily", "00:00", "", "", "fires once a day at a fixed time"},
		{"0 0 * * *", "00:00", "", "", "not before"},
	} {
		fire, latest, err := ReadyCron(tc.cron, tc.earliest)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q %q: error %v, want %q", tc.cron, tc.earliest, err, tc.err)
			}
			continue
		}
		if err != nil || fire != tc.fire || latest != tc.latest {
			t.Errorf("%q %q: %q %q %v, want %q %q", tc.cron, tc.earliest, fire, latest, err, tc.fire, tc.latest)
		}
		if err := checkCron(fire); err != nil {
			t.Errorf("fire cron %q: %v", fire, err)
		}
	}
}

func TestLatestStart(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		at     time.Time
		latest string
		want   string
	}{
		{time.Date(2026, 11, 28, 0, 0, 0, 0, paris), "03:00", "2026-11-28T03:00:00+01:00"},
		{time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC), "23:59", "2026-11-28T23:59:00Z"},
		// 02:30 does not exist in Paris on 2026-03-29: after the gap.
		{time.Date(2026, 3, 29, 0, 0, 0, 0, paris), "02:30", "2026-03-29T03:30:00+02:00"},
	} {
		got, err := LatestStart(tc.at, tc.latest)
		if err != nil || got.Format(time.RFC3339) != tc.want {
			t.Errorf("%s %s: %s %v, want %s", tc.at, tc.latest, got.Format(time.RFC3339), err, tc.want)
		}
	}
	if _, err := LatestStart(time.Now(), "25:00"); err == nil {
		t.Error("25:00: no error")
	}
}

func TestWhenReadyErrors(t *testing.T) {
	head := "name: x\nwait_for:\n  - {files: /d/x, deadline: 1h}\nschedules:\n"
	tail := "nodes:\n  - id: a\n    type: noop\n"
	for _, tc := range []errorCase{
		{"earliest alone", "  - id: s\n    cron: \"0 3 * * *\"\n    earliest: \"01:00\"\n", `schedule "s": earliest applies to when_ready schedules only`, 7},
		{"bad earliest", "  - id: s\n    cron: \"0 3 * * *\"\n    when_ready: true\n    earliest: \"1h\"\n", `earliest: "1h" is not a time of day`, 8},
		{"not a bool", "  - id: s\n    cron: \"0 3 * * *\"\n    when_ready: soon\n", "when_ready", 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("test.yaml", []byte(head+tc.src+tail))
			checkError(t, err, tc.want, tc.line)
		})
	}
	for _, tc := range []errorCase{
		{"every", "  - id: s\n    every: 1h\n    when_ready: true\n", `schedule "s": when_ready needs a cron that fires once a day at a fixed time, not every`, 7},
		{"hourly cron", "  - id: s\n    cron: \"0 * * * *\"\n    when_ready: true\n", `schedule "s": when_ready needs a cron that fires once a day at a fixed time`, 7},
		{"late earliest", "  - id: s\n    cron: \"0 3 * * *\"\n    when_ready: true\n    earliest: \"05:00\"\n", `schedule "s": earliest 05:00 is not before the cron's time 03:00`, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := mustParse(t, head+tc.src+tail)
			checkError(t, s.Validate(testRegistry(t)), tc.want, tc.line)
		})
	}
	// A pipeline without wait_for of its own (a node's does not start
	// the run) has nothing to be ready for.
	s := mustParse(t, "name: x\nschedules:\n  - id: nightly\n    cron: \"0 3 * * *\"\n    when_ready: true\nnodes:\n  - id: a\n    type: noop\n    wait_for: [{files: /d/x, deadline: 1h}]\n")
	checkError(t, s.Validate(testRegistry(t)), `schedule "nightly": when_ready needs the pipeline's own wait_for conditions (the run starts its nodes once they hold), and pipeline x has none`, 5)
}
