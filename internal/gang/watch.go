package gang

import (
	"slices"
	"sort"
	"sync"
	"time"
)

// Watch follows the steps each rank of a host reports, for hang detection
// and throughput. A rank is watched from its first progress line on: what
// comes before it (imports, data loading, the rendezvous) is the startup,
// which the node's timeout bounds, not the hang timeout.
type Watch struct {
	mu    sync.Mutex
	ranks map[int]*rankSteps
}

type rankSteps struct {
	first, last     int64     // the first and latest step seen
	firstAt, lastAt time.Time // when they were seen
	advancedAt      time.Time // when the step last went up
	done            bool      // the rank exited
}

// NewWatch returns an empty Watch.
func NewWatch() *Watch { return &Watch{ranks: map[int]*rankSteps{}} }

// Step records that rank reported step at now.
func (w *Watch) Step(rank int, step int64, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r, ok := w.ranks[rank]
	if !ok {
		w.ranks[rank] = &rankSteps{first: step, last: step, firstAt: now, lastAt: now, advancedAt: now}
		return
	}
	if step > r.last {
		r.last, r.lastAt, r.advancedAt = step, now, now
	}
}

// Done records that rank exited: it is no longer expected to advance.
func (w *Watch) Done(rank int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r, ok := w.ranks[rank]; ok {
		r.done = true
	}
}

// Stuck is a rank whose step did not advance for the hang timeout.
type Stuck struct {
	Rank  int
	Step  int64         // the last step it reported
	For   time.Duration // how long it has not advanced
	Ranks []int         // every rank stuck at once, Rank first
}

// Stuck returns the running rank that has not advanced for longer than
// timeout, the one at the lowest step (in a synchronous gang every rank
// stops when one does; the one behind is the one the others wait for),
// and false when none has.
func (w *Watch) Stuck(now time.Time, timeout time.Duration) (Stuck, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var stuck []int
	for rank, r := range w.ranks {
		if !r.done && now.Sub(r.advancedAt) > timeout {
			stuck = append(stuck, rank)
		}
	}
	if len(stuck) == 0 {
		return Stuck{}, false
	}
	sort.Slice(stuck, func(i, j int) bool {
		a, b := w.ranks[stuck[i]], w.ranks[stuck[j]]
		if a.last != b.last {
			return a.last < b.last
		}
		return stuck[i] < stuck[j]
	})
	r := w.ranks[stuck[0]]
	return Stuck{Rank: stuck[0], Step: r.last, For: now.Sub(r.advancedAt), Ranks: stuck}, true
}

// RankProgress is one rank's latest step and its pace.
type RankProgress struct {
	Rank        int     `json:"rank"`
	Step        int64   `json:"step"`
	StepsPerSec float64 `json:"steps_per_sec"`
	Seconds     float64 `json:"seconds"` // the time between its first and latest report
}

// Progress returns every watched rank's latest step and steps per second
// between its first and latest report, by rank.
func (w *Watch) Progress() []RankProgress {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]RankProgress, 0, len(w.ranks))
	for rank, r := range w.ranks {
		p := RankProgress{Rank: rank, Step: r.last}
		if d := r.lastAt.Sub(r.firstAt).Seconds(); d > 0 {
			p.StepsPerSec, p.Seconds = float64(r.last-r.first)/d, d
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b RankProgress) int { return a.Rank - b.Rank })
	return out
}

// HostPace is one host's training pace: the slowest of its ranks' steps
// per second (a host is as fast as its slowest rank).
func HostPace(ranks []RankProgress) float64 {
	pace := 0.0
	for i, r := range ranks {
		if i == 0 || r.StepsPerSec < pace {
			pace = r.StepsPerSec
		}
	}
	return pace
}

// StragglerRatio is the pace, relative to the median host's, below which
// a host is named the straggler.
const StragglerRatio = 0.8

// MinPaceWindow is the shortest training a pace is judged on: over a
// second or two, when each host's lines arrive (a loaded machine, a
// checkpoint) moves a pace by more than a straggler's margin.
const MinPaceWindow = 10.0 // seconds

// Slowest returns the host whose pace is below StragglerRatio of the
// median of paces (by host), and false when none is or fewer than two
// hosts report a pace.
func Slowest(paces map[string]float64) (string, float64, bool) {
	var hosts []string
	var vals []float64
	for h, p := range paces {
		if p > 0 {
			hosts = append(hosts, h)
			vals = append(vals, p)
		}
	}
	if len(vals) < 2 {
		return "", 0, false
	}
	sorted := slices.Clone(vals)
	slices.Sort(sorted)
	median := sorted[len(sorted)/2]
	if len(sorted)%2 == 0 {
		median = (sorted[len(sorted)/2-1] + sorted[len(sorted)/2]) / 2
	}
	slowest := ""
	for _, h := range slices.Sorted(slices.Values(hosts)) {
		if slowest == "" || paces[h] < paces[slowest] {
			slowest = h
		}
	}
	ratio := paces[slowest] / median
	return slowest, ratio, ratio < StragglerRatio
}
