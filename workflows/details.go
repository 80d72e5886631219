package workflows

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/retrain-ml/retrain/runs"
	"go.temporal.io/sdk/workflow"
)

// Current details are the markdown the Temporal Web UI shows on a run's
// page ("Current Details"): a list of the nodes and where the run's
// report is. They live in the workflow's memory only (the SDK answers the
// UI's metadata query with them), so setting them records nothing in
// history and cannot break replay.

// maxDetailRows bounds the node list: a run of 8,000 nodes shows the rows
// that matter (running and failed nodes first) and counts the rest, so
// each rebuild costs one pass over the statuses plus this many rows.
const maxDetailRows = 50

// Limits of one item's parts: outputs are a glance, the report has them all.
const (
	maxValueRunes = 40
	maxCellRunes  = 120
)

// ReportURL fills a report URL template: {run} becomes the run id, escaped
// as a path segment (run ids may hold '/').
func ReportURL(template, runID string) string {
	return strings.ReplaceAll(template, "{run}", url.PathEscape(runID))
}

// showDetails sets the run's current details to its state now. The
// scheduling loop calls it only when the workflow is about to block, so a
// workflow task that completes a hundred nodes renders the list once.
func (r *pipelineRun) showDetails(ctx workflow.Context) {
	res := r.view()
	workflow.SetCurrentDetails(ctx, renderDetails(&res, r.reportURL))
}

// renderDetails draws a run's state as markdown: a headline, the report
// link (or the command that writes the report), the error if any, and a
// list of at most maxDetailRows nodes with counts of the rest. A list, not
// a table: the Web UI draws markdown tables with no space between cells
// ("succeeded1") and cuts the wide outputs column off at the pane's edge.
func renderDetails(res *runs.Result, reportURL string) string {
	var b strings.Builder
	name := res.Pipeline
	if name == "" {
		name = "(unnamed spec)"
	}
	done := 0
	for _, n := range res.Nodes {
		if n.Status != runs.NodePending && n.Status != runs.NodeRunning && n.Status != runs.NodeWaiting {
			done++
		}
	}
	fmt.Fprintf(&b, "**%s** %s", escapeMarkdown(name), res.Status)
	if len(res.Nodes) > 0 {
		fmt.Fprintf(&b, ": %d of %d nodes done", done, len(res.Nodes))
	}
	b.WriteString("\n\n")
	if reportURL != "" {
		link := ReportURL(reportURL, res.ID)
		fmt.Fprintf(&b, "Report: [%s](%s)\n\n", escapeMarkdown(link), link)
	} else {
		fmt.Fprintf(&b, "Report: `retrain report %s`\n\n", strings.ReplaceAll(res.ID, "`", ""))
	}
	if res.Error != "" {
		fmt.Fprintf(&b, "Error: %s\n\n", cell(res.Error, 4*maxCellRunes))
	}
	for _, w := range res.Waiting {
		who := ""
		if w.Node != "" {
			who = " (node " + escapeMarkdown(w.Node) + ")"
		}
		fmt.Fprintf(&b, "Waiting for data%s: %s [%s, %d checks, deadline %s]\n\n", who, cell(w.Saw, 2*maxCellRunes),
			cell(w.Condition, maxCellRunes), w.Checks, w.Deadline.UTC().Format(time.RFC3339))
	}
	if len(res.Nodes) == 0 {
		return b.String()
	}

	rows := detailRows(res.Nodes, maxDetailRows)
	for _, i := range rows {
		writeRow(&b, res.Nodes[i], "")
	}
	for _, c := range res.Compensations {
		writeRow(&b, c, c.Compensates)
	}
	if hidden := len(res.Nodes) - len(rows); hidden > 0 {
		// Count every node, then take the shown rows back out: no per-node
		// bookkeeping (see BenchmarkRenderDetails).
		var counts [len(statusOrder)]int
		for _, n := range res.Nodes {
			counts[statusIndex(n.Status)]++
		}
		for _, i := range rows {
			counts[statusIndex(res.Nodes[i].Status)]--
		}
		var parts []string
		for i, s := range statusOrder {
			if counts[i] > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", counts[i], s))
			}
		}
		fmt.Fprintf(&b, "\n%d more nodes not shown: %s\n", hidden, strings.Join(parts, ", "))
	}
	return b.String()
}

// statusOrder is the order the counts of hidden nodes are listed in.
var statusOrder = [...]runs.NodeStatus{runs.NodeRunning, runs.NodeWaiting, runs.NodeFailed, runs.NodeSucceeded, runs.NodePending, runs.NodeSkipped, runs.NodeCancelled}

func statusIndex(s runs.NodeStatus) int {
	switch s {
	case runs.NodeRunning:
		return 0
	case runs.NodeWaiting:
		return 1
	case runs.NodeFailed:
		return 2
	case runs.NodeSucceeded:
		return 3
	case runs.NodePending:
		return 4
	case runs.NodeSkipped:
		return 5
	default:
		return 6
	}
}

// detailRows picks which nodes the table shows, in plan order: all of
// them when they fit, else running and failed nodes first, then the rest
// in plan order up to limit.
func detailRows(nodes []runs.NodeState, limit int) []int {
	if len(nodes) <= limit {
		rows := make([]int, len(nodes))
		for i := range rows {
			rows[i] = i
		}
		return rows
	}
	urgent := func(n runs.NodeState) bool { return n.Status == runs.NodeRunning || n.Status == runs.NodeFailed }
	rows := make([]int, 0, limit)
	for i, n := range nodes {
		if len(rows) == limit {
			break
		}
		if urgent(n) {
			rows = append(rows, i)
		}
	}
	for i, n := range nodes {
		if len(rows) == limit {
			break
		}
		if !urgent(n) {
			rows = append(rows, i)
		}
	}
	slices.Sort(rows)
	return rows
}

// writeRow writes a node as one list item: "**train** · train ·
// succeeded · 2 attempts · 17.8s: trained 6 epochs, ...".
func writeRow(b *strings.Builder, n runs.NodeState, compensates string) {
	typ := n.Type
	if compensates != "" {
		typ += " (undoes " + compensates + ")"
	}
	fmt.Fprintf(b, "- **%s** · %s · %s", cell(n.ID, maxCellRunes), cell(typ, maxCellRunes), n.Status)
	if n.Attempts > 1 {
		fmt.Fprintf(b, " · %d attempts", n.Attempts)
	}
	if d := duration(n); d != "" {
		b.WriteString(" · " + d)
	}
	if n.Cache != nil && n.ScheduledAt != nil {
		// "ago" as of the node's start: the workflow has no clock of its own.
		b.WriteString(" · " + cell(n.Cache.Note(*n.ScheduledAt), maxCellRunes))
	}
	if n.ReusedFrom != "" { // a rerun took the result over (rerun.go)
		b.WriteString(" · reused from run " + cell(n.ReusedFrom, maxCellRunes))
	}
	if n.Status == runs.NodeRunning {
		// The workflow never sees heartbeats; the UI shows them.
		b.WriteString(" (progress: Pending Activities)")
	}
	if s := summary(n); s != "" {
		b.WriteString(": " + s)
	}
	b.WriteString("\n")
}

// duration is how long the node took, or since when it runs.
func duration(n runs.NodeState) string {
	switch {
	case n.StartedAt != nil && n.EndedAt != nil:
		d := n.EndedAt.Sub(*n.StartedAt)
		if d < time.Second {
			return d.Round(time.Millisecond).String()
		}
		return d.Round(100 * time.Millisecond).String()
	case n.Status == runs.NodeRunning && n.ScheduledAt != nil:
		return "since " + n.ScheduledAt.UTC().Format("15:04:05Z")
	}
	return ""
}

// summary is what a node's item says after its status: the error of a failed node, the reason a
// node was skipped or cancelled, its one-line "summary" output, or else its
// outputs as key=value, each value cut short.
func summary(n runs.NodeState) string {
	switch {
	case n.Error != "":
		return cell(n.Error, maxCellRunes)
	case n.Reason != "":
		return cell(n.Reason, maxCellRunes)
	case len(n.Outputs) == 0:
		return ""
	}
	// A built-in node says what it did in one line.
	if s, ok := n.Outputs["summary"].(string); ok && s != "" {
		return cell(s, maxCellRunes)
	}
	keys := make([]string, 0, len(n.Outputs))
	for k := range n.Outputs {
		keys = append(keys, k)
	}
	slices.Sort(keys) // map order is random: the details must be deterministic
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		v := strings.TrimSpace(fmt.Sprint(n.Outputs[k]))
		if v == "" || v == "<nil>" {
			continue // an empty stderr says nothing at a glance
		}
		parts = append(parts, k+"="+truncate(v, maxValueRunes))
	}
	return cell(strings.Join(parts, ", "), maxCellRunes)
}

// cell makes s safe inside a markdown list item: one line, markdown
// characters escaped (outputs are whatever a command printed), at most max
// runes.
func cell(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	return escapeMarkdown(truncate(s, max))
}

func truncate(s string, max int) string {
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	r := []rune(s)
	return string(r[:max-1]) + "…"
}

var markdownEscaper = strings.NewReplacer(
	`\`, `\\`, "`", "\\`", `*`, `\*`, `_`, `\_`, `[`, `\[`, `]`, `\]`,
	`<`, `&lt;`, `>`, `&gt;`, `|`, `\|`, `#`, `\#`, `~`, `\~`, `!`, `\!`,
)

func escapeMarkdown(s string) string { return markdownEscaper.Replace(s) }
