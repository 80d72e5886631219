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
