package dags

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// A Wait is one readiness condition of a `wait_for:` list: what must hold
// for the run's logical date before the pipeline (or the node) starts.
// Exactly one of Table, Files and Command is set. The strings may hold
// ${params.NAME} and ${run.NAME} references, resolved when the run starts.
// It is JSON because plans carry it into workflow history.
type Wait struct {
	// Table: an Iceberg table whose current snapshot has at least
	// MinRows rows with the logical date in DateColumn, committed at
	// least CompleteAfter after the end of that date (0: any time).
	Table         string        `json:"table,omitempty"`
	DateColumn    string        `json:"date_column,omitempty"`
	MinRows       int64         `json:"min_rows,omitempty"`
	CompleteAfter time.Duration `json:"complete_after,omitempty"`
	// Files: a glob, local (inside the worker's --allow-paths) or
	// s3:// (in the worker's store), that matches at least one file; with
	// Marker, each folder holding a match holds a file of that name too.
	Files  string `json:"files,omitempty"`
	Marker string `json:"marker,omitempty"`
	// Command: a program (argv) that exits 0 once the data is there;
	// the worker's --allow-commands applies.
	Command []string `json:"command,omitempty"`

	// Deadline bounds the wait, from when it began; Poll is the first
	// interval between checks (later ones back off, see NextPoll).
	Deadline time.Duration `json:"deadline"`
	Poll     time.Duration `json:"poll"`
	// OnDeadline is what a condition still false at its deadline does:
	// WaitFail (the run fails with DataNotReady) or WaitSkip (the run,
	// or the node and its dependents, ends skipped).
	OnDeadline string `json:"on_deadline,omitempty"`

	Pos Pos `json:"-"`
}

// What a condition does at its deadline.
const (
	WaitFail = "fail"
	WaitSkip = "skip"
)

// Defaults of a condition's optional settings.
const (
	DefaultWaitPoll    = time.Minute
	DefaultWaitMinRows = 1
	DefaultDateColumn  = "date"
)

var waitFields = []string{"table", "date_column", "min_rows", "complete_after", "files", "marker", "command", "deadline", "poll", "on_deadline"}

// tableNameRe is what a table name looks like once its references are
// resolved: namespace.table, dotted identifiers.
var tableNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$`)

// Kind names the condition's kind: "table", "files" or "command".
func (w Wait) Kind() string {
	switch {
	case w.Table != "":
		return "table"
	case w.Files != "":
		return "files"
	}
	return "command"
}

// Name is how messages name the condition: "table features.user_daily",
// "files /data/2026-11-27/*.parquet", "command check-feed --day 2026-11-27".
func (w Wait) Name() string {
	switch w.Kind() {
	case "table":
		return "table " + w.Table
	case "files":
		return "files " + w.Files
	}
	return "command " + strings.Join(w.Command, " ")
}

// NextPoll is the interval before check number attempt+1 (attempt counts
// from 0) of a condition polled every poll at first: it grows by half
// each time up to eight times poll, so a long wait costs few checks, and
// never runs past the time left before the deadline.
func NextPoll(poll time.Duration, attempt int, left time.Duration) time.Duration {
	d := poll
	for i := 0; i < attempt && d < 8*poll; i++ {
		d += d / 2
	}
	d = min(d, 8*poll)
	return max(min(d, left), 0)
}

// waitFor decodes a wait_for list (what is "wait_for" or "node X
// wait_for").
func (p *parser) waitFor(n *yaml.Node, what string) []*Wait {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "%s must be a list of conditions, got %s", what, kind(n))
		return nil
	}
	var out []*Wait
	for i, item := range n.Content {
		if w := p.wait(item, fmt.Sprintf("%s[%d]", what, i)); w != nil {
			out = append(out, w)
		}
	}
	return out
}

func (p *parser) wait(n *yaml.Node, what string) *Wait {
	w := &Wait{Pos: posOf(resolve(n)), OnDeadline: WaitFail}
	m, ok := p.mapping(n, what)
	if !ok {
		return nil
	}
	p.unknown(m, "in "+what, waitFields, nil)
	str := func(key string) (string, *yaml.Node) {
		v := m.get(key)
		if v == nil {
			return "", nil
		}
		s, _ := p.str(v, what+"."+key)
		return s, v
	}
	var kinds []string
	var v *yaml.Node
	if w.Table, v = str("table"); v != nil {
		kinds = append(kinds, "table")
		p.waitRefs(v, what+".table", w.Table)
		if !HasRef(w.Table) && w.Table != "" && !tableNameRe.MatchString(w.Table) {
			p.errorf(v, "%s.table %q is not a table name (namespace.table)", what, w.Table)
		}
	}
	if w.Files, v = str("files"); v != nil {
		kinds = append(kinds, "files")
		p.waitRefs(v, what+".files", w.Files)
		if w.Files != "" && !strings.HasPrefix(w.Files, "/") && !strings.HasPrefix(w.Files, "s3://") {
			p.errorf(v, "%s.files %q must be an absolute path or an s3:// URI", what, w.Files)
		}
	}
	if v = m.get("command"); v != nil {
		kinds = append(kinds, "command")
		w.Command, _, _ = p.stringList(v, what+".command")
		if len(w.Command) == 0 {
			p.errorf(v, "%s.command must not be empty", what)
		}
		for _, a := range w.Command {
			p.waitRefs(v, what+".command", a)
		}
	}
	switch {
	case len(kinds) == 0:
		p.errorf(n, "%s: give one of table, files or command", what)
	case len(kinds) > 1:
		p.errorf(n, "%s: give one of table, files or command, not %s", what, strings.Join(kinds, " and "))
	}
	isTable := slices.Contains(kinds, "table")
	onlyFor := func(key, kind string, ok bool) *yaml.Node {
		v := m.get(key)
		if v != nil && !ok {
			p.errorf(v, "%s.%s applies to %s conditions only", what, key, kind)
			return nil
		}
		return v
	}
	if isTable {
		w.DateColumn, w.MinRows = DefaultDateColumn, DefaultWaitMinRows
	}
	if v := onlyFor("date_column", "table", isTable); v != nil {
		if s, ok := p.str(v, what+".date_column"); ok {
			if !keyRe.MatchString(s) {
				p.errorf(v, "%s.date_column %q is not a column name", what, s)
			}
			w.DateColumn = s
		}
	}
	if v := onlyFor("min_rows", "table", isTable); v != nil {
		if i, ok := p.int(v, what+".min_rows"); ok {
			if i < 1 {
				p.errorf(v, "%s.min_rows must be at least 1, got %d", what, i)
			}
			w.MinRows = int64(i)
		}
	}
	if v := onlyFor("complete_after", "table", isTable); v != nil {
		if d, ok := p.duration(v, what+".complete_after"); ok {
			w.CompleteAfter = d
		}
	}
	if v := onlyFor("marker", "files", slices.Contains(kinds, "files")); v != nil {
		if s, ok := p.str(v, what+".marker"); ok {
			if s == "" || strings.ContainsAny(s, "/*?[") || s == "." || s == ".." {
				p.errorf(v, "%s.marker %q must be a plain file name, such as _SUCCESS", what, s)
			}
			w.Marker = s
		}
	}
	if v := m.get("deadline"); v != nil {
		if d, ok := p.duration(v, what+".deadline"); ok {
			if d <= 0 {
				p.errorf(v, "%s.deadline must be positive", what)
			}
			w.Deadline = d
		}
	} else {
		p.errorf(n, "%s: missing required field \"deadline\" (how long to wait, e.g. 6h)", what)
	}
	// Without a poll, check every minute, or ten times within a shorter
	// deadline (at most once a second).
	w.Poll = min(DefaultWaitPoll, max(w.Deadline/10, time.Second))
	if v := m.get("poll"); v != nil {
		if d, ok := p.duration(v, what+".poll"); ok {
			if d < time.Second {
				p.errorf(v, "%s.poll must be at least 1s, got %s", what, formatDuration(d))
			} else if w.Deadline > 0 && d > w.Deadline {
				p.errorf(v, "%s: deadline %s is shorter than poll %s: the condition would be checked once at most",
					what, formatDuration(w.Deadline), formatDuration(d))
			}
			w.Poll = d
		}
	}
	if v := m.get("on_deadline"); v != nil {
		if s, ok := p.str(v, what+".on_deadline"); ok {
			if s != WaitFail && s != WaitSkip {
				p.errorf(v, "%s.on_deadline %q: use fail or skip", what, s)
			}
			w.OnDeadline = s
		}
	}
	return w
}

// waitRefs checks the references of a condition's string: params and
// run values only, as a condition is checked before any node ran.
func (p *parser) waitRefs(n *yaml.Node, what, s string) {
	refs, err := Refs(s)
	if err != nil {
		p.errorf(n, "%s: %v", what, err)
		return
	}
	for _, r := range refs {
		if r.Kind != "params" && r.Kind != "run" {
			p.errorf(n, "%s references %s; a condition may use ${params.NAME} and ${run.NAME} only", what, r)
		}
	}
}

// validateWaits checks what parsing could not: that the params and run
// values the conditions name exist.
func (v *validator) validateWaits(s *Spec) {
	check := func(w *Wait, where string) {
		for _, str := range append([]string{w.Table, w.Files}, w.Command...) {
			refs, err := Refs(str)
			if err != nil {
				continue // reported by Parse
			}
			for _, r := range refs {
				switch {
				case r.Kind == "params" && s.Param(r.Name) == nil:
					v.at(w.Pos, "%s references %s, which is not a declared param", where, r)
				case r.Kind == "run" && !slices.Contains(RunValueNames, r.Name):
					v.at(w.Pos, "%s references %s, which is not a run value; run values are %s", where, r, strings.Join(RunValueNames, ", "))
				}
			}
		}
	}
	for _, w := range s.WaitFor {
		check(w, "wait_for "+w.Name())
	}
	for _, group := range [][]*Node{s.Nodes, s.OnFailure} {
		for _, n := range group {
			for _, w := range n.WaitFor {
				check(w, fmt.Sprintf("node %s wait_for %s", n.ID, w.Name()))
			}
		}
	}
}

// ResolveWait returns w with its references resolved in sc (params and
// run values), checked as parsing checks literal values.
func ResolveWait(w Wait, sc Scope) (Wait, error) {
	one := func(what, s string) (string, error) {
		if !HasRef(s) {
			return s, nil
		}
		v, err := Interpolate(s, sc)
		if err != nil {
			return "", fmt.Errorf("%s: %w", what, err)
		}
		out, ok := v.(string)
		if !ok {
			out = fmt.Sprint(v)
		}
		return out, nil
	}
	var err error
	if w.Table, err = one("table", w.Table); err != nil {
		return w, err
	}
	if w.Table != "" && !tableNameRe.MatchString(w.Table) {
		return w, fmt.Errorf("table %q is not a table name (namespace.table)", w.Table)
	}
	if w.Files, err = one("files", w.Files); err != nil {
		return w, err
	}
	if w.Files != "" && !strings.HasPrefix(w.Files, "/") && !strings.HasPrefix(w.Files, "s3://") {
		return w, fmt.Errorf("files %q must be an absolute path or an s3:// URI", w.Files)
	}
	cmd := make([]string, len(w.Command))
	for i, a := range w.Command {
		if cmd[i], err = one("command", a); err != nil {
			return w, err
		}
	}
	if len(cmd) > 0 {
		w.Command = cmd
	}
	return w, nil
}

func cloneWaits(ws []*Wait) []Wait {
	if len(ws) == 0 {
		return nil
	}
	out := make([]Wait, len(ws))
	for i, w := range ws {
		out[i] = *w
		out[i].Command = slices.Clone(w.Command)
	}
	return out
}
