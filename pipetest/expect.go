package pipetest

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/retrain-ml/retrain/runs"
)

// StateRow is one node's expected and actual state, for the diff a failed
// case prints.
type StateRow struct {
	Node     string
	Expected string // "" when the case expects nothing of it
	Actual   string
	Detail   string // why it was skipped, or its error
	Mismatch bool
}

// compare checks a run against a case's expectations and returns what did
// not match, and the node table.
func compare(c *Case, res *runs.Result, h *caseRun) ([]string, []StateRow) {
	h.mu.Lock()
	failures := slices.Clone(h.problems)
	h.mu.Unlock()
	e := c.Expect
	if e.Status != "" && string(res.Status) != e.Status {
		failures = append(failures, fmt.Sprintf("run: status %s, want %s%s", res.Status, e.Status, errSuffix(res.Error)))
	}
	if e.ErrorType != "" {
		if got := runErrorType(res, h); got != e.ErrorType {
			failures = append(failures, fmt.Sprintf("run: error type %s, want %s%s", orNone(got), e.ErrorType, errSuffix(res.Error)))
		}
	}
	if e.Error != "" && !strings.Contains(res.Error, e.Error) {
		failures = append(failures, fmt.Sprintf("run: error %q does not contain %q", res.Error, e.Error))
	}
	expected := map[string]*NodeExpect{}
	for _, x := range e.Nodes {
		expected[x.ID] = x
		failures = append(failures, compareNode(x, res, h)...)
	}
	return failures, table(res, expected, failures)
}

func errSuffix(msg string) string {
	if msg == "" {
		return ""
	}
	return " (" + msg + ")"
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// runErrorType is the type of the error that failed the run: that of the
// node whose failure it was (a GateRejected gate, a CanaryRolledBack
// canary, a stub's), or the run's own (InvalidPipeline) when no node's.
func runErrorType(res *runs.Result, h *caseRun) string {
	if res.Status == runs.StatusSucceeded {
		return ""
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if id, _, ok := strings.Cut(strings.TrimPrefix(res.Error, "node "), ":"); ok && strings.HasPrefix(res.Error, "node ") {
		if t := h.errTypes[id]; t != "" {
			return t
		}
		// A foreach node fails with its instances' failure.
		for _, n := range res.Nodes {
			if strings.HasPrefix(n.ID, id+"[") && n.Status == runs.NodeFailed && h.errTypes[n.ID] != "" {
				return h.errTypes[n.ID]
			}
		}
	}
	if res.Status == runs.StatusCancelled {
		return "Cancelled"
	}
	if len(res.Nodes) == 0 || allPending(res) {
		return "InvalidPipeline"
	}
	return ""
}

func allPending(res *runs.Result) bool {
	for _, n := range res.Nodes {
		if n.Status != runs.NodePending && n.Status != runs.NodeCancelled {
			return false
		}
	}
	return true
}

// state finds a node, instance or on_failure node in a run's result.
func state(res *runs.Result, id string) *runs.NodeState {
	if n := res.Node(id); n != nil {
		return n
	}
	for i := range res.Compensations {
		if res.Compensations[i].ID == id {
			return &res.Compensations[i]
		}
	}
	return nil
}

func compareNode(x *NodeExpect, res *runs.Result, h *caseRun) []string {
	n := state(res, x.ID)
	if n == nil {
		if x.Status == string(runs.NodePending) {
			return nil
		}
		return []string{fmt.Sprintf("node %s: not in the run's result (it never started), want %s", x.ID, orNone(x.Status))}
	}
	var out []string
	fail := func(format string, args ...any) {
		out = append(out, fmt.Sprintf("node %s: ", x.ID)+fmt.Sprintf(format, args...))
	}
	if x.Status != "" && string(n.Status) != x.Status {
		fail("status %s, want %s%s", n.Status, x.Status, errSuffix(detail(n)))
	}
	if x.Reason != "" && !strings.Contains(n.Reason, x.Reason) {
		fail("reason %q does not contain %q", n.Reason, x.Reason)
	}
	if x.Error != "" && !strings.Contains(n.Error, x.Error) {
		fail("error %q does not contain %q", n.Error, x.Error)
	}
	h.mu.Lock()
	errType, with, traffic := h.errTypes[x.ID], h.with[x.ID], h.traffic[x.ID]
	h.mu.Unlock()
	if x.ErrorType != "" && errType != x.ErrorType {
		fail("error type %s, want %s", orNone(errType), x.ErrorType)
	}
	if x.Attempts != nil && int(n.Attempts) != *x.Attempts {
		fail("%d attempts, want %d", n.Attempts, *x.Attempts)
	}
	if x.Instances != nil {
		count := 0
		for _, s := range res.Nodes {
			if strings.HasPrefix(s.ID, x.ID+"[") {
				count++
			}
		}
		if c, ok := n.Outputs["count"].(float64); ok {
			count = int(c)
		}
		if count != *x.Instances {
			fail("%d instances, want %d", count, *x.Instances)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(x.Outputs)) {
		if why := subset(x.Outputs[k], n.Outputs[k], "outputs."+k, keyPresent(n.Outputs, k)); why != "" {
			fail("%s", why)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(x.With)) {
		if why := subset(x.With[k], with[k], "with."+k, keyPresent(with, k)); why != "" {
			fail("%s", why)
		}
	}
	if x.HasTraffic && !slices.Equal(traffic, x.Traffic) {
		fail("traffic %s, want %s", percents(traffic), percents(x.Traffic))
	}
	return out
}

func keyPresent(m map[string]any, k string) bool {
	_, ok := m[k]
	return ok
}

func percents(p []float64) string {
	parts := make([]string, len(p))
	for i, v := range p {
		parts[i] = strconv.FormatFloat(v, 'g', -1, 64) + "%"
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// subset reports how got fails to match want: a mapping matches when each
// of want's keys matches, a list when it has as many elements each
// matching, a number by value, anything else by equality. "" when it
// matches.
func subset(want, got any, path string, present bool) string {
	if !present {
		return fmt.Sprintf("%s is missing, want %s", path, show(want))
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s is %s, want a mapping %s", path, show(got), show(want))
		}
		for _, k := range slices.Sorted(maps.Keys(w)) {
			if why := subset(w[k], g[k], path+"."+k, keyPresent(g, k)); why != "" {
				return why
			}
		}
		return ""
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Sprintf("%s is %s, want %s", path, show(got), show(want))
		}
		for i := range w {
			if why := subset(w[i], g[i], fmt.Sprintf("%s[%d]", path, i), true); why != "" {
				return why
			}
		}
		return ""
	}
	if wf, ok := number(want); ok {
		if gf, ok := number(got); ok && gf == wf {
			return ""
		}
	} else if reflect.DeepEqual(want, got) {
		return ""
	}
	return fmt.Sprintf("%s is %s, want %s", path, show(got), show(want))
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case int32:
		return float64(x), true
	}
	return 0, false
}

func show(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case nil:
		return "null"
	}
	s := fmt.Sprintf("%v", v)
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

func detail(n *runs.NodeState) string {
	switch {
	case n.Error != "":
		return n.Error
	case n.Reason != "":
		return n.Reason
	}
	return ""
}

// table lists every node of the run, and every expected one it lacks,
// with what was expected of it and what it did.
func table(res *runs.Result, expected map[string]*NodeExpect, failures []string) []StateRow {
	var rows []StateRow
	seen := map[string]bool{}
	mismatch := func(id string) bool {
		for _, f := range failures {
			if strings.HasPrefix(f, "node "+id+":") || strings.HasPrefix(f, "node "+id+" (") {
				return true
			}
		}
		return false
	}
	add := func(n runs.NodeState) {
		seen[n.ID] = true
		row := StateRow{Node: n.ID, Actual: string(n.Status), Detail: detail(&n), Mismatch: mismatch(n.ID)}
		if x := expected[n.ID]; x != nil {
			row.Expected = x.Status
			if row.Expected == "" {
				row.Expected = "(see above)"
			}
		}
		rows = append(rows, row)
	}
	for _, n := range res.Nodes {
		add(n)
	}
	for _, n := range res.Compensations {
		add(n)
	}
	for _, id := range slices.Sorted(maps.Keys(expected)) {
		if x := expected[id]; !seen[id] {
			rows = append(rows, StateRow{Node: id, Expected: x.Status, Actual: "(absent)", Mismatch: mismatch(id)})
		}
	}
	return rows
}
