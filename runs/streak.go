package runs

import "strings"

// DefaultRejectedStreak is how many scheduled runs in a row a pipeline's
// gate may reject before `retrain runs list` warns: a nightly run whose
// gate rejects ends succeeded (on_reject: skip), and nothing ships.
const DefaultRejectedStreak = 3

// RejectedStreak is a pipeline whose gate rejected its latest scheduled
// runs in a row.
type RejectedStreak struct {
	Pipeline string
	// Runs are the rejected runs, newest first.
	Runs []string
	// AtLeast: the runs looked at ended inside the streak, which may be
	// longer.
	AtLeast bool
}

// GateOutcome reads a run's gate verdict (RunInfo.Gate, as Verdict writes
// it): rejected when a gate rejected the candidate, passed when every
// gate passed it; neither when the run had no gate, or its gate did not
// decide (failed, skipped, still running).
func GateOutcome(verdict string) (rejected, passed bool) {
	if verdict == "" {
		return false, false
	}
	passed = true
	for part := range strings.SplitSeq(verdict, ", ") {
		if _, v, ok := strings.Cut(part, "="); ok {
			part = v
		}
		switch part {
		case "rejected":
			return true, false
		case "passed":
		default:
			passed = false
		}
	}
	return false, passed
}

// RejectedStreaks returns, in the order their newest run appears, the
// pipelines of list (newest first, as List returns it) whose latest
// scheduled runs' gates rejected at least n in a row. Runs started by
// hand, runs still going, and runs whose gate did not decide neither
// count nor break a streak; a passed gate breaks it. n < 1 finds none.
func RejectedStreaks(list []RunInfo, n int) []RejectedStreak {
	if n < 1 {
		return nil
	}
	type state struct {
		runs   []string
		broken bool
	}
	var order []string
	byPipeline := map[string]*state{}
	for _, r := range list {
		if r.Schedule == "" || r.Status == StatusRunning {
			continue
		}
		s := byPipeline[r.Pipeline]
		if s == nil {
			s = &state{}
			byPipeline[r.Pipeline] = s
			order = append(order, r.Pipeline)
		}
		if s.broken {
			continue
		}
		switch rejected, passed := GateOutcome(r.Gate); {
		case rejected:
			s.runs = append(s.runs, r.ID)
		case passed:
			s.broken = true
		}
	}
	var out []RejectedStreak
	for _, p := range order {
		if s := byPipeline[p]; len(s.runs) >= n {
			out = append(out, RejectedStreak{Pipeline: p, Runs: s.runs, AtLeast: !s.broken})
		}
	}
	return out
}
