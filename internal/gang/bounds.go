package gang

import (
	"fmt"
	"strings"
	"time"
)

// Budget is the time one attempt of a gang has: the node's timeout
// bounds the whole attempt, forming included, so gang_timeout is capped
// by it and a lease is never held past it. A gang whose node timeout is
// 2m cannot keep hosts (and their GPUs) waiting for 100h because its
// gang_timeout says so.
type Budget struct {
	Start   time.Time     // when the attempt began looking for hosts
	Timeout time.Duration // the node's timeout; 0 or less: none
	Join    time.Duration // gang_timeout
}

// End is when the attempt must be over; the zero time when the node has
// no timeout.
func (b Budget) End() time.Time {
	if b.Timeout <= 0 {
		return time.Time{}
	}
	return b.Start.Add(b.Timeout)
}

// Capped reports whether the node's timeout, not gang_timeout, ends the
// forming.
func (b Budget) Capped() bool { return b.Timeout > 0 && b.Timeout < b.Join }

// JoinDeadline is when the forming gives up: gang_timeout after the
// start, or the node's timeout when that comes first.
func (b Budget) JoinDeadline() time.Time {
	if b.Capped() {
		return b.End()
	}
	return b.Start.Add(b.Join)
}

// Hold is how long a host that is asked to join at now holds its lease
// for the run to take: until the join deadline plus margin (the run's
// time to be picked up), but never past the attempt's end.
func (b Budget) Hold(now time.Time, margin time.Duration) time.Duration {
	hold := b.JoinDeadline().Sub(now) + margin
	if end := b.End(); !end.IsZero() {
		hold = min(hold, end.Sub(now))
	}
	return max(hold, 0)
}

// Left is what remains of the attempt at now for the ranks to run: the
// node's timeout less what forming took (0 or less once it has passed).
// ok is false when the node has no timeout.
func (b Budget) Left(now time.Time) (left time.Duration, ok bool) {
	end := b.End()
	if end.IsZero() {
		return 0, false
	}
	return end.Sub(now), true
}

// Limits are what a worker's operator lets one train node ask of each
// host: ranks per host (processes) and hosts per gang. Zero is no limit.
type Limits struct {
	MaxProcesses int // --max-processes-per-host
	MaxHosts     int // --max-hosts
}

// The worker flags that set Limits, as errors name them.
const (
	FlagMaxProcesses = "--max-processes-per-host"
	FlagMaxHosts     = "--max-hosts"
)

// DefaultMaxHosts is the hosts a gang may span when the worker's operator
// set no --max-hosts.
const DefaultMaxHosts = 16

// minDefaultProcesses is the least default of ranks per host: the
// examples' two ranks still run in a one-core container.
const minDefaultProcesses = 2

// DefaultLimits are the limits of a host with cores CPU cores and gpus
// GPUs whose operator set none: a rank per core or per GPU, whichever is
// more, and DefaultMaxHosts.
func DefaultLimits(cores, gpus int) Limits {
	return Limits{MaxProcesses: max(cores, gpus, minDefaultProcesses), MaxHosts: DefaultMaxHosts}
}

// LimitError is a node that asks a host for more than its operator allows.
type LimitError struct {
	Field string // the `with` field: processes or hosts
	Value int
	Limit int
	Flag  string // the worker flag that sets Limit
	Why   string // how Value came to be, when the field was not written ("one per GPU")
}

func (e *LimitError) Error() string {
	what := "ranks per host"
	if e.Field == "hosts" {
		what = "hosts per gang"
	}
	why := ""
	if e.Why != "" {
		why = " (" + e.Why + ")"
	}
	return fmt.Sprintf("%s %d%s is above this worker's limit of %d %s (%s): ask for at most %d, or have the operator raise %s",
		e.Field, e.Value, why, e.Limit, what, e.Flag, e.Limit, e.Flag)
}

// Check refuses processes ranks per host (why says how that number came
// to be when processes was not written) or hosts hosts past l.
func (l Limits) Check(processes int, why string, hosts int) error {
	if l.MaxHosts > 0 && hosts > l.MaxHosts {
		return &LimitError{Field: "hosts", Value: hosts, Limit: l.MaxHosts, Flag: FlagMaxHosts}
	}
	if l.MaxProcesses > 0 && processes > l.MaxProcesses {
		return &LimitError{Field: "processes", Value: processes, Limit: l.MaxProcesses, Flag: FlagMaxProcesses, Why: why}
	}
	return nil
}

// FormatDuration writes d as a spec would: 2m, 1h30m, 90s, not 2m0s.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
