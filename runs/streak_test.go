package runs

import (
	"reflect"
	"testing"
)

func TestGateOutcome(t *testing.T) {
	for _, c := range []struct {
		verdict          string
		rejected, passed bool
	}{
		{"", false, false},
		{"passed", false, true},
		{"rejected", true, false},
		{"failed", false, false},
		{"g1=passed, g2=rejected", true, false},
		{"g1=passed, g2=passed", false, true},
		{"g1=passed, g2=skipped", false, false},
	} {
		if r, p := GateOutcome(c.verdict); r != c.rejected || p != c.passed {
			t.Errorf("%q: rejected %v passed %v", c.verdict, r, p)
		}
	}
}

func TestRejectedStreaks(t *testing.T) {
	run := func(id, pipeline, schedule string, status Status, gate string) RunInfo {
		return RunInfo{ID: id, Pipeline: pipeline, Schedule: schedule, Status: status, Gate: gate}
	}
	list := []RunInfo{ // newest first
		run("ctr-7", "ctr", "daily", StatusRunning, "running"),      // still going: ignored
		run("ctr-6", "ctr", "daily", StatusSucceeded, "rejected"),   // 1
		run("ctr-5", "ctr", "", StatusSucceeded, "passed"),          // by hand: neither counts nor breaks
		run("ctr-4", "ctr", "daily", StatusFailed, "cancelled"),     // gate never decided: ignored
		run("ctr-3", "ctr", "daily", StatusSucceeded, "rejected"),   // 2
		run("ctr-2", "ctr", "daily", StatusSucceeded, "rejected"),   // 3
		run("ctr-1", "ctr", "daily", StatusSucceeded, "passed"),     // breaks it
		run("ctr-0", "ctr", "daily", StatusSucceeded, "rejected"),   // before the pass: not counted
		run("ok-2", "ok", "daily", StatusSucceeded, "passed"),       // healthy
		run("ok-1", "ok", "daily", StatusSucceeded, "rejected"),     //
		run("two-2", "two", "daily", StatusSucceeded, "rejected"),   // only two, list ends
		run("two-1", "two", "nightly", StatusSucceeded, "rejected"), //
	}
	got := RejectedStreaks(list, 3)
	want := []RejectedStreak{{Pipeline: "ctr", Runs: []string{"ctr-6", "ctr-3", "ctr-2"}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	got = RejectedStreaks(list, 2)
	want = append(want, RejectedStreak{Pipeline: "two", Runs: []string{"two-2", "two-1"}, AtLeast: true})
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("n=2: got %+v\nwant %+v", got, want)
	}
	if got := RejectedStreaks(list, 0); got != nil {
		t.Fatalf("n=0: %+v", got)
	}
}
