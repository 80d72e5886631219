package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/retrain-ml/retrain/runs"
)

// PrintSummary prints a run's per-node table.
func PrintSummary(w io.Writer, res *runs.Result) {
	fmt.Fprintf(w, "pipeline %s: %s", res.Pipeline, statusWord(res.Status))
	if res.EndedAt != nil {
		fmt.Fprintf(w, " in %s", res.EndedAt.Sub(res.StartedAt).Round(time.Millisecond))
	}
	fmt.Fprintln(w)
	if line := runs.ReusedLine(res); line != "" {
		fmt.Fprintln(w, line)
	}
	now := time.Now()
	printWaits(w, res, now)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	// A CACHE column when a node is cached: how it was served, or why not.
	cached := slices.ContainsFunc(res.Nodes, func(n runs.NodeState) bool { return n.Cache != nil })
	if cached {
		fmt.Fprintln(tw, "  NODE\tTYPE\tSTATUS\tATTEMPTS\tTIME\tCACHE\tDETAIL")
	} else {
		fmt.Fprintln(tw, "  NODE\tTYPE\tSTATUS\tATTEMPTS\tTIME\tDETAIL")
	}
	for _, n := range slices.Concat(res.Nodes, res.Compensations) {
		if cached {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.ID, n.Type, n.Status, attempts(n), took(n), cacheNote(n, now), detail(n))
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", n.ID, n.Type, n.Status, attempts(n), took(n), detail(n))
	}
	tw.Flush()
	if res.Error != "" {
		fmt.Fprintf(w, "error: %s\n", res.Error)
	}
}

// cacheNote is the node cache's word on n, "-" for a node not cached.
func cacheNote(n runs.NodeState, now time.Time) string {
	if n.Cache == nil {
		return "-"
	}
	s := strings.ReplaceAll(n.Cache.Note(now), "\n", " ")
	if r := []rune(s); len(r) > 80 {
		s = string(r[:77]) + "..."
	}
	return s
}

func attempts(n runs.NodeState) string {
	if n.Attempts == 0 {
		return "-"
	}
	return fmt.Sprint(n.Attempts)
}

func took(n runs.NodeState) string {
	if n.StartedAt == nil || n.EndedAt == nil {
		return "-"
	}
	return n.EndedAt.Sub(*n.StartedAt).Round(time.Millisecond).String()
}

// summaryOf is a node's one-line "summary" output, if it has one.
func summaryOf(n runs.NodeState) string {
	s, _ := n.Outputs["summary"].(string)
	return s
}

func detail(n runs.NodeState) string {
	var s string
	switch {
	case n.Error != "":
		s = n.Error
	case n.Reason != "":
		s = n.Reason
	case n.ReusedFrom != "":
		s = "reused from run " + n.ReusedFrom
		if sum := summaryOf(n); sum != "" {
			s += ": " + sum
		}
	case n.NotReused != "" && n.Status == runs.NodeSucceeded:
		s = "ran again (" + n.NotReused + ")"
		if sum := summaryOf(n); sum != "" {
			s += ": " + sum
		}
	case summaryOf(n) != "":
		// Nodes that read data say which rows in one line.
		s = summaryOf(n)
	case len(n.Outputs) > 0:
		b, _ := json.Marshal(n.Outputs)
		s = string(b)
	}
	if n.Compensates != "" {
		s = "compensates " + n.Compensates + ": " + s
	}
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 100 {
		s = s[:97] + "..."
	}
	return s
}

// Progress prints node status changes as a run goes.
type Progress struct {
	mu   sync.Mutex
	w    io.Writer
	seen map[string]runs.NodeStatus
}

// NewProgress returns a Progress printing to w.
func NewProgress(w io.Writer) *Progress {
	return &Progress{w: w, seen: map[string]runs.NodeStatus{}}
}

// Update prints every node whose status changed since the last call.
func (p *Progress) Update(res *runs.Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range slices.Concat(res.Nodes, res.Compensations) {
		if n.Status == runs.NodePending || p.seen[n.ID] == n.Status {
			continue
		}
		p.seen[n.ID] = n.Status
		line := fmt.Sprintf("  %-24s %s", n.ID, n.Status)
		if n.Status != runs.NodeRunning {
			if a := attempts(n); a != "-" {
				line += fmt.Sprintf(" (attempts %s, %s)", a, took(n))
			}
		}
		if n.Cache != nil && (n.Cache.Hit || n.Status == runs.NodeRunning) {
			// A hit when it lands; a miss's reason when the node starts.
			line += " " + cacheNote(n, time.Now())
		}
		fmt.Fprintln(p.w, line)
	}
}

// printWaits says what a waiting run waits for, and which snapshots the
// conditions that held saw ready.
func printWaits(w io.Writer, res *runs.Result, now time.Time) {
	for _, x := range res.Waiting {
		fmt.Fprintln(w, x.Text(now))
	}
	for _, r := range res.Ready {
		who := ""
		if r.Node != "" {
			who = "node " + r.Node + " "
		}
		fmt.Fprintf(w, "%sdata ready: %s (%s, at %s)\n", who, r.Saw, r.Condition, r.At.Local().Format(time.DateTime))
	}
}
