// Package pipetest runs a pipeline's test cases, `retrain test`: the real
// Pipeline workflow and its child workflows (gate, canary, foreach chunks)
// in Temporal's test environment, where timers skip ahead, with every node
// answered by the stub its case gives (outputs, an error, a sequence per
// attempt) or, for the node types that need nothing external, run for real
// when the case says so. A node without a stub fails its case: a test never
// runs a node for real by default.
//
// A test file, PIPELINE.test.yaml beside PIPELINE.yaml, holds the cases;
// docs/testing-pipelines.md describes its form.
package pipetest

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/retrain-ml/retrain/dags"
)

// File is a parsed test file.
type File struct {
	Path        string
	Pipeline    string // the pipeline's name, when the file names it
	PipelinePos dags.Pos
	Cases       []*Case
}

// Case is one test case: a run's input, a stub per node, what to expect.
type Case struct {
	Name        string
	Pos         dags.Pos
	Params      map[string]any
	ParamPos    map[string]dags.Pos
	LogicalDate string
	Schedule    string
	// Timeout bounds the run's (skipped) time; past it the case fails,
	// naming the nodes it was waiting on.
	Timeout time.Duration
	Stubs   []*Stub // in file order
	Expect  Expect
}

// Stub answers a node (or one instance of a foreach node, ID[N]).
type Stub struct {
	Node string // id, or id[N]
	Pos  dags.Pos
	// Run runs the node's own implementation (command, noop, gate).
	Run bool
	// Attempts answer attempt 1, 2, ...; the last answers any later one.
	// A stub of outputs or of an error is a single attempt.
	Attempts []Attempt
	// Approve and Reject decide a gate waiting for approval, or a canary
	// mid-bake, as `retrain approve` and `retrain reject` would.
	Approve *Decision
	Reject  *Decision
	Canary  *CanaryStub
}

// Attempt is one attempt's answer: outputs, or an error.
type Attempt struct {
	Pos        dags.Pos
	Outputs    map[string]any
	OutputsPos map[string]dags.Pos
	Error      *StubError
}

// StubError is a stubbed failure.
type StubError struct {
	Type      string
	Message   string
	Retryable bool
}

// Decision is a person's approval or rejection, After into the gate's
// wait or into the canary's Step (1-based).
type Decision struct {
	Pos    dags.Pos
	Step   int
	After  time.Duration
	By     string
	Reason string
}

// CanaryStub stands for the registry and Prometheus of a canary node: the
// versions it is between and each check's values at each baked step.
type CanaryStub struct {
	Pos        dags.Pos
	Version    string
	Production string
	Steps      []map[string]Sample // per baked step: check name -> values
	StepsPos   []dags.Pos
}

// Sample is a check's values during a step; nil is no data.
type Sample struct {
	Canary, Production, Count *float64
}

// Expect is what a case asserts.
type Expect struct {
	Pos       dags.Pos
	Status    string
	ErrorType string
	Error     string // a substring of the run's error
	Nodes     []*NodeExpect
}

// NodeExpect is what a case asserts of one node, one instance of a
// foreach node, or one on_failure node.
type NodeExpect struct {
	ID         string
	Pos        dags.Pos
	Status     string
	Reason     string // substring
	Error      string // substring
	ErrorType  string
	Attempts   *int
	Outputs    map[string]any // subset
	OutputsPos map[string]dags.Pos
	With       map[string]any // subset of the resolved `with` it got
	Instances  *int           // a foreach node's instances
	Traffic    []float64      // a canary's traffic splits, in order
	HasTraffic bool
}

// DefaultTimeout is a case's run-time limit when it sets none.
const DefaultTimeout = 7 * 24 * time.Hour

// ReadFile reads and parses a test file.
func ReadFile(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// parser collects errors at positions, as the spec parser does.
type parser struct {
	file string
	errs dags.ErrorList
}

func (p *parser) at(n *yaml.Node, format string, args ...any) {
	line, col := 0, 0
	if n != nil {
		line, col = n.Line, n.Column
	}
	p.errs = append(p.errs, &dags.Error{File: p.file, Line: line, Col: col, Msg: fmt.Sprintf(format, args...)})
}

// deref follows an alias (*anchor) to its node.
func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func pos(n *yaml.Node) dags.Pos { return dags.Pos{Line: n.Line, Col: n.Column} }

// pairs returns a mapping's keys and values, refusing other kinds and
// keys not in allowed (nil: any key).
// YAML merge keys (<<: *anchor) are expanded: the mapping's own keys win.
func (p *parser) pairs(n *yaml.Node, what string, allowed ...string) [][2]*yaml.Node {
	n = deref(n)
	if n == nil {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		p.at(n, "%s: want a mapping", what)
		return nil
	}
	var out [][2]*yaml.Node
	seen := map[string]bool{}
	own := map[string]bool{}
	var merged [][2]*yaml.Node
	var content [][2]*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		if k.ShortTag() == "!!merge" {
			srcs := []*yaml.Node{v}
			if v.Kind == yaml.SequenceNode {
				srcs = v.Content
			}
			for _, src := range srcs {
				src = deref(src)
				if src.Kind != yaml.MappingNode {
					p.at(src, "%s: << merges a mapping", what)
					continue
				}
				for j := 0; j+1 < len(src.Content); j += 2 {
					merged = append(merged, [2]*yaml.Node{src.Content[j], deref(src.Content[j+1])})
				}
			}
			continue
		}
		own[k.Value] = true
		content = append(content, [2]*yaml.Node{k, v})
	}
	for _, kv := range merged {
		if !own[kv[0].Value] {
			own[kv[0].Value] = true
			content = append(content, kv)
		}
	}
	for _, kv := range content {
		k, v := kv[0], kv[1]
		if seen[k.Value] {
			p.at(k, "%s: %s is given twice", what, k.Value)
			continue
		}
		seen[k.Value] = true
		if allowed != nil && !contains(allowed, k.Value) {
			p.at(k, "%s: unknown key %q%s; want one of %s", what, k.Value, didYouMean(k.Value, allowed), strings.Join(allowed, ", "))
			continue
		}
		out = append(out, [2]*yaml.Node{k, v})
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

var yamlLineRe = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// Parse parses a test file's contents; file names it in errors.
func Parse(file string, data []byte) (*File, error) {
	p := &parser{file: file}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		line := 0
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		if m := yamlLineRe.FindStringSubmatch(err.Error()); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = m[2]
		}
		return nil, dags.ErrorList{{File: file, Line: line, Msg: "syntax error: " + msg}}
	}
	if len(root.Content) == 0 {
		return nil, dags.ErrorList{{File: file, Msg: "empty test file: want a mapping with cases"}}
	}
	f := &File{Path: file}
	var casesNode *yaml.Node
	for _, kv := range p.pairs(root.Content[0], "test file", "pipeline", "cases") {
		switch kv[0].Value {
		case "pipeline":
			f.Pipeline, f.PipelinePos = p.str(kv[1], "pipeline"), pos(kv[1])
		case "cases":
			casesNode = kv[1]
		}
	}
	switch {
	case casesNode == nil:
		p.at(root.Content[0], "test file has no cases")
	case casesNode.Kind != yaml.SequenceNode || len(casesNode.Content) == 0:
		p.at(casesNode, "cases: want a list of cases")
	default:
		names := map[string]bool{}
		for i, cn := range casesNode.Content {
			c := p.testCase(cn, i)
			if c == nil {
				continue
			}
			if names[c.Name] {
				p.at(cn, "case %q is given twice", c.Name)
			}
			names[c.Name] = true
			f.Cases = append(f.Cases, c)
		}
	}
	if len(p.errs) > 0 {
		return nil, p.errs
	}
	return f, nil
}

func (p *parser) str(n *yaml.Node, what string) string {
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" {
		p.at(n, "%s: want a string", what)
		return ""
	}
	return n.Value
}

func (p *parser) value(n *yaml.Node, what string) any {
	var v any
	if err := n.Decode(&v); err != nil {
		p.at(n, "%s: %v", what, err)
		return nil
	}
	return normalize(v)
}

// normalize turns YAML's values into JSON's: numbers are float64, keys
// strings, as a value that went through a run's history.
func normalize(v any) any {
	switch x := v.(type) {
	case int:
		return float64(x)
	case int64:
		return float64(x)
	case uint64:
		return float64(x)
	case float32:
		return float64(x)
	case map[string]any:
		for k, e := range x {
			x[k] = normalize(e)
		}
		return x
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[fmt.Sprint(k)] = normalize(e)
		}
		return m
	case []any:
		for i, e := range x {
			x[i] = normalize(e)
		}
		return x
	case time.Time:
		return x.Format(time.RFC3339)
	}
	return v
}

func (p *parser) mapping(n *yaml.Node, what string) (map[string]any, map[string]dags.Pos) {
	out, at := map[string]any{}, map[string]dags.Pos{}
	for _, kv := range p.pairs(n, what) {
		out[kv[0].Value] = p.value(kv[1], what+"."+kv[0].Value)
		at[kv[0].Value] = pos(kv[0])
	}
	return out, at
}

func (p *parser) duration(n *yaml.Node, what string) time.Duration {
	s := p.str(n, what)
	if s == "" {
		return 0
	}
	d, err := dags.ParseDuration(s)
	if err != nil || d < 0 {
		p.at(n, "%s: %q is not a duration such as 30m or 2h", what, s)
		return 0
	}
	return d
}

func (p *parser) integer(n *yaml.Node, what string) int {
	i, err := strconv.Atoi(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil || i < 0 {
		p.at(n, "%s: want a whole number", what)
	}
	return i
}

func (p *parser) testCase(n *yaml.Node, i int) *Case {
	c := &Case{Pos: pos(n), Timeout: DefaultTimeout}
	what := fmt.Sprintf("cases[%d]", i)
	var stubs, expect *yaml.Node
	for _, kv := range p.pairs(n, what, "name", "params", "logical_date", "schedule", "timeout", "stubs", "expect") {
		k, v := kv[0].Value, kv[1]
		switch k {
		case "name":
			c.Name = p.str(v, what+".name")
		case "params":
			c.Params, c.ParamPos = p.mapping(v, what+".params")
		case "logical_date":
			c.LogicalDate = p.str(v, what+".logical_date")
		case "schedule":
			c.Schedule = p.str(v, what+".schedule")
		case "timeout":
			if c.Timeout = p.duration(v, what+".timeout"); c.Timeout == 0 {
				c.Timeout = DefaultTimeout
			}
		case "stubs":
			stubs = v
		case "expect":
			expect = v
		}
	}
	if c.Name == "" {
		p.at(n, "%s: a case needs a name", what)
		return nil
	}
	what = fmt.Sprintf("case %q", c.Name)
	for _, kv := range p.pairs(stubs, what+": stubs") {
		if s := p.stub(kv[0], kv[1], what); s != nil {
			c.Stubs = append(c.Stubs, s)
		}
	}
	if expect == nil {
		p.at(n, "%s: no expect: a case must assert something", what)
		return c
	}
	c.Expect = p.expect(expect, what)
	return c
}

var stubKeys = []string{"run", "outputs", "error", "attempts", "approve", "reject", "canary"}

func (p *parser) stub(k, n *yaml.Node, what string) *Stub {
	s := &Stub{Node: k.Value, Pos: pos(k)}
	what = fmt.Sprintf("%s: stub %s", what, k.Value)
	if n.Kind == yaml.ScalarNode && n.Value == "run" {
		s.Run = true // `node: run`, short for {run: true}
		return s
	}
	forms := 0
	var single Attempt
	for _, kv := range p.pairs(n, what, stubKeys...) {
		key, v := kv[0].Value, kv[1]
		switch key {
		case "run":
			if v.Value != "true" && v.Value != "false" {
				p.at(v, "%s: run: want true or false", what)
			}
			s.Run = v.Value == "true"
			forms++
		case "outputs":
			single.Pos = pos(kv[0])
			single.Outputs, single.OutputsPos = p.mapping(v, what+": outputs")
			forms++
		case "error":
			single.Pos = pos(kv[0])
			single.Error = p.stubError(v, what+": error")
			forms++
		case "attempts":
			if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
				p.at(v, "%s: attempts: want a list of {outputs} or {error}, one per attempt", what)
				continue
			}
			for j, an := range v.Content {
				s.Attempts = append(s.Attempts, p.attempt(an, fmt.Sprintf("%s: attempts[%d]", what, j)))
			}
			forms++
		case "approve":
			s.Approve = p.decision(v, what+": approve")
		case "reject":
			s.Reject = p.decision(v, what+": reject")
		case "canary":
			s.Canary = p.canary(v, what+": canary")
			forms++
		}
	}
	if single.Outputs != nil || single.Error != nil {
		s.Attempts = []Attempt{single}
	}
	switch {
	case forms == 0:
		p.at(k, "%s: give outputs, error, attempts, canary or run: true", what)
	case forms > 1:
		p.at(k, "%s: give one of outputs, error, attempts, canary and run: true", what)
	case !s.Run && s.Canary == nil && (s.Approve != nil || s.Reject != nil):
		p.at(k, "%s: approve and reject go with a gate that runs (run: true) or a canary stub", what)
	}
	if s.Approve != nil && s.Reject != nil {
		p.at(k, "%s: give approve or reject, not both", what)
	}
	return s
}

func (p *parser) attempt(n *yaml.Node, what string) Attempt {
	a := Attempt{Pos: pos(n)}
	for _, kv := range p.pairs(n, what, "outputs", "error") {
		switch kv[0].Value {
		case "outputs":
			a.Outputs, a.OutputsPos = p.mapping(kv[1], what+": outputs")
		case "error":
			a.Error = p.stubError(kv[1], what+": error")
		}
	}
	if (a.Outputs == nil) == (a.Error == nil) {
		p.at(n, "%s: give outputs or error", what)
	}
	return a
}

// DefaultErrorType is a stubbed error's type when it names none.
const DefaultErrorType = "StubError"

func (p *parser) stubError(n *yaml.Node, what string) *StubError {
	e := &StubError{Type: DefaultErrorType, Message: "stubbed failure", Retryable: true}
	if n.Kind == yaml.ScalarNode {
		e.Message = n.Value // `error: message`
		return e
	}
	for _, kv := range p.pairs(n, what, "type", "message", "retryable") {
		switch kv[0].Value {
		case "type":
			e.Type = p.str(kv[1], what+".type")
		case "message":
			e.Message = p.str(kv[1], what+".message")
		case "retryable":
			if kv[1].Value != "true" && kv[1].Value != "false" {
				p.at(kv[1], "%s.retryable: want true or false", what)
			}
			e.Retryable = kv[1].Value != "false"
		}
	}
	return e
}

func (p *parser) decision(n *yaml.Node, what string) *Decision {
	d := &Decision{Pos: pos(n), By: "retrain-test", Reason: "approved in a test"}
	if strings.HasSuffix(what, "reject") {
		d.Reason = "rejected in a test"
	}
	for _, kv := range p.pairs(n, what, "step", "after", "by", "reason") {
		switch kv[0].Value {
		case "step":
			d.Step = p.integer(kv[1], what+".step")
			if d.Step < 1 {
				p.at(kv[1], "%s.step: steps count from 1", what)
			}
		case "after":
			d.After = p.duration(kv[1], what+".after")
		case "by":
			d.By = p.str(kv[1], what+".by")
		case "reason":
			d.Reason = p.str(kv[1], what+".reason")
		}
	}
	return d
}

func (p *parser) canary(n *yaml.Node, what string) *CanaryStub {
	c := &CanaryStub{Pos: pos(n), Version: "v2", Production: "v1"}
	for _, kv := range p.pairs(n, what, "version", "production", "steps") {
		switch kv[0].Value {
		case "version":
			c.Version = p.str(kv[1], what+".version")
		case "production":
			c.Production = p.str(kv[1], what+".production")
		case "steps":
			if kv[1].Kind != yaml.SequenceNode {
				p.at(kv[1], "%s.steps: want a list, one entry per baked step: {CHECK: value, ...}", what)
				continue
			}
			for j, sn := range kv[1].Content {
				c.Steps = append(c.Steps, p.canaryStep(sn, fmt.Sprintf("%s.steps[%d]", what, j)))
				c.StepsPos = append(c.StepsPos, pos(sn))
			}
		}
	}
	if c.Version == c.Production {
		p.at(n, "%s: version and production are both %q: a canary needs two versions", what, c.Version)
	}
	return c
}

func (p *parser) canaryStep(n *yaml.Node, what string) map[string]Sample {
	out := map[string]Sample{}
	for _, kv := range p.pairs(n, what) {
		name, v := kv[0].Value, kv[1]
		if v.Kind == yaml.ScalarNode {
			out[name] = Sample{Canary: p.number(v, what+"."+name)}
			continue
		}
		var s Sample
		for _, f := range p.pairs(v, what+"."+name, "canary", "production", "count") {
			x := p.number(f[1], what+"."+name+"."+f[0].Value)
			switch f[0].Value {
			case "canary":
				s.Canary = x
			case "production":
				s.Production = x
			case "count":
				s.Count = x
			}
		}
		out[name] = s
	}
	return out
}

// number reads a number, or null (no data).
func (p *parser) number(n *yaml.Node, what string) *float64 {
	if n.ShortTag() == "!!null" {
		return nil
	}
	f, err := strconv.ParseFloat(n.Value, 64)
	if n.Kind != yaml.ScalarNode || err != nil {
		p.at(n, "%s: want a number or null (no data)", what)
		return nil
	}
	return &f
}

var nodeExpectKeys = []string{"status", "reason", "error", "error_type", "attempts", "outputs", "with", "instances", "traffic"}

func (p *parser) expect(n *yaml.Node, what string) Expect {
	e := Expect{Pos: pos(n)}
	what += ": expect"
	for _, kv := range p.pairs(n, what, "status", "error_type", "error", "nodes") {
		switch kv[0].Value {
		case "status":
			e.Status = p.str(kv[1], what+".status")
		case "error_type":
			e.ErrorType = p.str(kv[1], what+".error_type")
		case "error":
			e.Error = p.str(kv[1], what+".error")
		case "nodes":
			for _, nk := range p.pairs(kv[1], what+".nodes") {
				e.Nodes = append(e.Nodes, p.nodeExpect(nk[0], nk[1], what+".nodes"))
			}
		}
	}
	return e
}

func (p *parser) nodeExpect(k, n *yaml.Node, what string) *NodeExpect {
	x := &NodeExpect{ID: k.Value, Pos: pos(k)}
	what += "." + k.Value
	if n.Kind == yaml.ScalarNode {
		x.Status = n.Value // `node: succeeded`
		return x
	}
	for _, kv := range p.pairs(n, what, nodeExpectKeys...) {
		v := kv[1]
		switch kv[0].Value {
		case "status":
			x.Status = p.str(v, what+".status")
		case "reason":
			x.Reason = p.str(v, what+".reason")
		case "error":
			x.Error = p.str(v, what+".error")
		case "error_type":
			x.ErrorType = p.str(v, what+".error_type")
		case "attempts":
			a := p.integer(v, what+".attempts")
			x.Attempts = &a
		case "instances":
			i := p.integer(v, what+".instances")
			x.Instances = &i
		case "outputs":
			x.Outputs, x.OutputsPos = p.mapping(v, what+".outputs")
		case "with":
			x.With, _ = p.mapping(v, what+".with")
		case "traffic":
			x.HasTraffic = true
			if v.Kind != yaml.SequenceNode {
				p.at(v, "%s.traffic: want a list of percents", what)
				continue
			}
			for _, e := range v.Content {
				if f := p.number(e, what+".traffic"); f != nil {
					x.Traffic = append(x.Traffic, *f)
				}
			}
		}
	}
	return x
}

// didYouMean suggests the closest of candidates to word, if one is close.
func didYouMean(word string, candidates []string) string {
	best, bestD := "", 0
	for _, c := range candidates {
		d := editDistance(strings.ToLower(word), strings.ToLower(c))
		if best == "" || d < bestD {
			best, bestD = c, d
		}
	}
	if best == "" || bestD > max(2, len(word)/3) || bestD >= len(word) {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
