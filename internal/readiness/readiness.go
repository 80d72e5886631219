// Package readiness decides whether a run's data is there: a table whose
// current snapshot covers the run's date, a set of files (with a marker),
// or a command's verdict. The decisions are pure functions of what a
// check found, so the workflow's polling, the schedules that wait for
// data and the tests all judge the same facts the same way; gathering the
// facts (the lake, the file system, the store) is the caller's.
package readiness

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/retrain-ml/retrain/internal/number"
)

// Observation is what one check of a condition saw.
type Observation struct {
	Ready bool `json:"ready"`
	// Saw says what the check found, for the run's state while it waits
	// and for the DataNotReady error at its deadline.
	Saw string `json:"saw"`
	// SnapshotID and Rows are a table condition's: the snapshot it read
	// and the rows it found for the date there.
	SnapshotID int64 `json:"snapshot_id,omitempty"`
	Rows       int64 `json:"rows,omitempty"`
}

// TableFacts are what a table check read from the lake.
type TableFacts struct {
	Table string
	Date  string // the run's logical date, YYYY-MM-DD
	// HasSnapshot is false for a table with no snapshot yet; the rest is
	// then unset.
	HasSnapshot bool
	SnapshotID  int64
	CommittedAt time.Time // the snapshot's commit time
	Rows        int64     // rows with Date in the date column
	PrevRows    int64     // rows with the day before Date, for the message
}

// TableWant is what a table condition asks.
type TableWant struct {
	MinRows int64
	// CompleteAfter, when not zero, is how long after the end of the
	// date (midnight UTC of the next day) the snapshot must have been
	// committed: a publisher that appends through the night and is done
	// by 01:00 is waited for with 1h.
	CompleteAfter time.Duration
}

// Table judges a table condition on what the check read.
func Table(f TableFacts, w TableWant) (Observation, error) {
	day, err := time.Parse(time.DateOnly, f.Date)
	if err != nil {
		return Observation{}, fmt.Errorf("logical date %q: %w", f.Date, err)
	}
	if !f.HasSnapshot {
		return Observation{Saw: fmt.Sprintf("%s has no snapshot yet", f.Table)}, nil
	}
	obs := Observation{SnapshotID: f.SnapshotID, Rows: f.Rows}
	last := fmt.Sprintf("last snapshot %s, %s rows for %s", clock(f.CommittedAt, day),
		number.Count(f.PrevRows), day.AddDate(0, 0, -1).Format("01-02"))
	switch {
	case f.Rows == 0:
		obs.Saw = fmt.Sprintf("%s has no rows for %s (%s)", f.Table, f.Date, last)
	case f.Rows < max(w.MinRows, 1):
		obs.Saw = fmt.Sprintf("%s has %s rows for %s, fewer than min_rows %s (snapshot %d at %s)", f.Table,
			number.Count(f.Rows), f.Date, number.Count(w.MinRows), f.SnapshotID, clock(f.CommittedAt, day))
	case w.CompleteAfter > 0 && f.CommittedAt.Before(day.AddDate(0, 0, 1).Add(w.CompleteAfter)):
		obs.Saw = fmt.Sprintf("%s has %s rows for %s, but its last snapshot (%s) is before %s, when the day is complete",
			f.Table, number.Count(f.Rows), f.Date, clock(f.CommittedAt, day),
			day.AddDate(0, 0, 1).Add(w.CompleteAfter).UTC().Format("2006-01-02 15:04 UTC"))
	default:
		obs.Ready = true
		obs.Saw = fmt.Sprintf("%s has %s rows for %s in snapshot %d", f.Table, number.Count(f.Rows), f.Date, f.SnapshotID)
	}
	return obs, nil
}

// clock writes a commit time briefly: the time of day when it is the
// date's day or the next (when a day's data usually lands), else in full.
func clock(t time.Time, day time.Time) string {
	t = t.UTC()
	if d := t.Sub(day); d >= 0 && d < 48*time.Hour {
		return t.Format("01-02 15:04")
	}
	return t.Format("2006-01-02 15:04")
}

// FileFacts are what a files check found: the files the glob matched, and
// which of their folders lack the marker (when one is asked).
type FileFacts struct {
	Pattern        string
	Matches        []string
	Marker         string
	MissingMarkers []string // folders of matches without the marker
}

// MarkerFolders are the folders a marker must be in: each folder that
// holds a match, once, sorted. The marker files themselves are not
// matches (a glob of "*" would otherwise count a lone _SUCCESS as data).
func MarkerFolders(matches []string, marker string) []string {
	var out []string
	for _, m := range DataFiles(matches, marker) {
		dir := path.Dir(m)
		if !slices.Contains(out, dir) {
			out = append(out, dir)
		}
	}
	slices.Sort(out)
	return out
}

// DataFiles are the matches that are not marker files.
func DataFiles(matches []string, marker string) []string {
	if marker == "" {
		return matches
	}
	var out []string
	for _, m := range matches {
		if path.Base(m) != marker {
			out = append(out, m)
		}
	}
	return out
}

// Files judges a files condition.
func Files(f FileFacts) Observation {
	data := DataFiles(f.Matches, f.Marker)
	switch {
	case len(data) == 0:
		return Observation{Saw: fmt.Sprintf("no files match %s", f.Pattern)}
	case len(f.MissingMarkers) > 0:
		return Observation{Saw: fmt.Sprintf("%s %s, but %s has no %s", filesMatch(len(data)), f.Pattern,
			strings.Join(f.MissingMarkers, ", "), f.Marker)}
	}
	saw := fmt.Sprintf("%s %s", filesMatch(len(data)), f.Pattern)
	if f.Marker != "" {
		saw += " with " + f.Marker
	}
	return Observation{Ready: true, Saw: saw}
}

// Command judges a command condition: ready when it exited 0. tail is the
// end of what it wrote, shown while the run waits.
func Command(argv []string, exitCode int, tail string) Observation {
	if exitCode == 0 {
		return Observation{Ready: true, Saw: fmt.Sprintf("%s exited 0", argv[0])}
	}
	saw := fmt.Sprintf("%s exited %d", argv[0], exitCode)
	if tail = strings.TrimSpace(tail); tail != "" {
		lines := strings.Split(tail, "\n")
		last := lines[len(lines)-1]
		if len(last) > 200 {
			last = last[:200] + "..."
		}
		saw += ": " + last
	}
	return Observation{Saw: saw}
}

func filesMatch(n int) string {
	if n == 1 {
		return "1 file matches"
	}
	return fmt.Sprintf("%d files match", n)
}
