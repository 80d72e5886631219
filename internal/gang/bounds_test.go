package gang

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestBudgetCapsJoinAndHold(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	margin := 2 * time.Minute
	cases := []struct {
		name            string
		b               Budget
		at              time.Duration // after Start
		wantDeadline    time.Duration // after Start
		wantCapped      bool
		wantHold        time.Duration
		wantLeft        time.Duration
		wantLeftBounded bool
	}{
		// The reported case: timeout 2m, gang_timeout 100h. Forming ends
		// at 2m, and a host asked at 30s holds 1m30s, not 100h2m.
		{"node timeout caps gang_timeout", Budget{Start: t0, Timeout: 2 * time.Minute, Join: 100 * time.Hour}, 30 * time.Second,
			2 * time.Minute, true, 90 * time.Second, 90 * time.Second, true},
		// gang_timeout shorter: it ends the forming; the hold keeps its
		// margin while that fits the node's timeout.
		{"gang_timeout first", Budget{Start: t0, Timeout: time.Hour, Join: 10 * time.Minute}, time.Minute,
			10 * time.Minute, false, 9*time.Minute + margin, 59 * time.Minute, true},
		// The margin is cut where the node's timeout ends first.
		{"margin cut by the node's end", Budget{Start: t0, Timeout: 11 * time.Minute, Join: 10 * time.Minute}, 9 * time.Minute,
			10 * time.Minute, false, 2 * time.Minute, 2 * time.Minute, true},
		// Equal: gang_timeout is not longer, nothing is capped.
		{"equal", Budget{Start: t0, Timeout: 10 * time.Minute, Join: 10 * time.Minute}, 0,
			10 * time.Minute, false, 10 * time.Minute, 10 * time.Minute, true},
		// No node timeout (recorded runs before the bound): as before.
		{"no node timeout", Budget{Start: t0, Join: 10 * time.Minute}, time.Minute,
			10 * time.Minute, false, 9*time.Minute + margin, 0, false},
		// Past the end: nothing to hold, nothing left.
		{"past the end", Budget{Start: t0, Timeout: time.Minute, Join: time.Hour}, 2 * time.Minute,
			time.Minute, true, 0, -time.Minute, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			now := t0.Add(c.at)
			if got := c.b.JoinDeadline().Sub(t0); got != c.wantDeadline {
				t.Errorf("join deadline %v after the start, want %v", got, c.wantDeadline)
			}
			if c.b.Capped() != c.wantCapped {
				t.Errorf("capped %v, want %v", c.b.Capped(), c.wantCapped)
			}
			if got := c.b.Hold(now, margin); got != c.wantHold {
				t.Errorf("hold %v, want %v", got, c.wantHold)
			}
			left, ok := c.b.Left(now)
			if ok != c.wantLeftBounded || (ok && left != c.wantLeft) {
				t.Errorf("left %v (%v), want %v (%v)", left, ok, c.wantLeft, c.wantLeftBounded)
			}
		})
	}
}

func TestLimitsCheck(t *testing.T) {
	l := Limits{MaxProcesses: 4, MaxHosts: 3}
	for _, ok := range [][2]int{{1, 1}, {4, 3}, {4, 1}} {
		if err := l.Check(ok[0], "", ok[1]); err != nil {
			t.Errorf("processes %d, hosts %d: %v", ok[0], ok[1], err)
		}
	}
	err := l.Check(30, "", 2)
	var le *LimitError
	if !errors.As(err, &le) || le.Field != "processes" || le.Value != 30 || le.Limit != 4 {
		t.Fatalf("processes 30: %v", err)
	}
	for _, want := range []string{"processes 30", "limit of 4 ranks per host", "--max-processes-per-host"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	err = l.Check(5, "one per GPU", 1)
	if err == nil || !strings.Contains(err.Error(), "processes 5 (one per GPU) is above") {
		t.Errorf("processes from gpus: %v", err)
	}
	err = l.Check(1, "", 4)
	if !errors.As(err, &le) || le.Field != "hosts" || !strings.Contains(err.Error(), "hosts 4 is above this worker's limit of 3 hosts per gang (--max-hosts)") {
		t.Errorf("hosts 4: %v", err)
	}
	if err := (Limits{}).Check(1000, "", 1000); err != nil {
		t.Errorf("no limits: %v", err)
	}
}

func TestDefaultLimits(t *testing.T) {
	for _, c := range []struct{ cores, gpus, want int }{{16, 0, 16}, {8, 16, 16}, {1, 0, 2}, {4, 2, 4}} {
		if got := DefaultLimits(c.cores, c.gpus); got.MaxProcesses != c.want || got.MaxHosts != DefaultMaxHosts {
			t.Errorf("%d cores, %d GPUs: %+v, want %d ranks per host", c.cores, c.gpus, got, c.want)
		}
	}
}

func TestJoinErrorNamesTheNodeTimeout(t *testing.T) {
	e := &JoinError{Joined: 2, Want: 3, Hosts: []string{"a", "b"}, Queue: "q", Timeout: "100h", NodeTimeout: "2m"}
	if s := e.Error(); !strings.Contains(s, "2 of 3 hosts joined the gang within the node's timeout 2m (which bounds the whole attempt and caps gang_timeout 100h)") {
		t.Errorf("%s", s)
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{2 * time.Minute: "2m", 100 * time.Hour: "100h", 90 * time.Minute: "1h30m", 90 * time.Second: "1m30s", 5 * time.Second: "5s", 1500 * time.Millisecond: "1.5s"} {
		if got := FormatDuration(d); got != want {
			t.Errorf("%v: %q, want %q", d, got, want)
		}
	}
}
