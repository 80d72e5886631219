package dags

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

var (
	nameRe  = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)
	idRe    = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]*$`)
	paramRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)
	keyRe   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)
)

// Known fields at each level, in the order the docs list them (suggestions
// prefer the first of equally close candidates).
var (
	topFields     = []string{"name", "description", "params", "defaults", "parallelism", "schedules", "wait_for", "nodes", "on_failure"}
	paramFields   = []string{"type", "default", "required", "description"}
	defaultFields = []string{"retry", "timeout", "heartbeat", "queue", "cache"}
	retryFields   = []string{"max_attempts", "initial_interval", "backoff", "max_interval", "non_retryable"}
	nodeFields    = []string{"id", "type", "description", "needs", "when", "foreach", "max_parallel", "fail_fast", "with", "outputs", "wait_for", "retry", "timeout", "heartbeat", "queue", "cache"}
	compFields    = append(append([]string{}, nodeFields...), "compensates")
)

// Parse parses a pipeline spec (YAML, or JSON, which is YAML) and checks its
// shape: known fields, kinds of values, ids, durations and ranges. It does
// not check what needs a registry or the whole graph; see Validate. Errors
// are an ErrorList with the position of each problem.
func Parse(filename string, data []byte) (*Spec, error) {
	p := &parser{errs: errs{file: filename}}
	if len(data) > maxSpecBytes {
		p.at(Pos{Line: 1}, "spec is %d bytes; the limit is %d (1 MiB)", len(data), maxSpecBytes)
		return nil, p.list.Err()
	}
	s := p.parse(data)
	if err := p.list.Err(); err != nil {
		return nil, err
	}
	s.File = filename
	return s, nil
}

// Load parses and validates a spec.
func Load(filename string, data []byte, reg *Registry) (*Spec, error) {
	s, err := Parse(filename, data)
	if err != nil {
		return nil, err
	}
	if err := s.Validate(reg); err != nil {
		return nil, err
	}
	return s, nil
}

type parser struct {
	errs
	values    int // values decoded so far, against maxValues
	nodeCount int // nodes and on_failure nodes, against maxNodes
	tooBig    bool
	// merged memoizes the mappings merge keys bring in, by source node
	// and depth: a chain of anchors each merging the one before ten
	// times would otherwise expand 10^n mappings before the values
	// budget stopped it (half a second of CPU per such spec).
	merged map[mergeSource]mergeResult
}

type mergeSource struct {
	n     *yaml.Node
	depth int
}

type mergeResult struct {
	m  mapping
	ok bool
}

func (p *parser) parse(data []byte) *Spec {
	s := &Spec{Parallelism: DefaultParallelism}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.at(Pos{Line: 1}, "empty spec")
		} else {
			p.syntaxError(err)
		}
		return s
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		// A trailing "---" with nothing after it is harmless.
		if len(extra.Content) > 0 && !(extra.Content[0].Kind == yaml.ScalarNode && extra.Content[0].ShortTag() == "!!null") {
			p.errorf(extra.Content[0], "a spec is one YAML document; found another")
		}
	} else if !errors.Is(err, io.EOF) {
		p.syntaxError(err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	root = resolve(root)
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		p.errorf(root, "empty spec")
		return s
	}
	s.Pos = posOf(root)
	m, ok := p.mapping(root, "the spec")
	if !ok {
		return s
	}
	p.unknown(m, "at top level", topFields, nil)

	if v := m.get("name"); v != nil {
		if name, ok := p.str(v, "name"); ok {
			s.Name = name
			if !nameRe.MatchString(name) {
				p.errorf(v, "invalid name %q: use lowercase letters, digits, '_' and '-', starting with a letter or digit", name)
			}
		}
	} else {
		p.errorf(root, "missing required field \"name\"")
	}
	if v := m.opt("description"); v != nil {
		s.Description, _ = p.str(v, "description")
	}
	if v := m.opt("params"); v != nil {
		s.ParamsPos = m.keyPos("params")
		s.Params = p.params(v)
	}
	if v := m.opt("defaults"); v != nil {
		s.Defaults = p.defaults(v)
		s.Defaults.Pos = m.keyPos("defaults")
	}
	if v := m.get("parallelism"); v != nil {
		if n, ok := p.int(v, "parallelism"); ok {
			if n < 1 {
				p.errorf(v, "parallelism must be at least 1, got %d", n)
			} else {
				s.Parallelism = n
			}
		}
	}
	if v := m.opt("schedules"); v != nil {
		s.SchedulesPos = m.keyPos("schedules")
		s.Schedules = p.schedules(v) // schedule.go
	}
	if v := m.opt("wait_for"); v != nil {
		s.WaitFor = p.waitFor(v, "wait_for") // waitfor.go
	}
	if v := m.get("nodes"); v != nil {
		s.Nodes = p.nodes(v, "nodes", false)
		if seq := resolve(v); seq.Kind == yaml.SequenceNode && len(seq.Content) == 0 {
			p.errorf(v, "nodes must not be empty")
		}
	} else {
		p.errorf(root, "missing required field \"nodes\"")
	}
	if v := m.opt("on_failure"); v != nil {
		s.OnFailure = p.nodes(v, "on_failure", true)
	}
	return s
}

func (p *parser) params(n *yaml.Node) []*Param {
	m, ok := p.mapping(n, "params")
	if !ok {
		return nil
	}
	var out []*Param
	for _, kv := range m {
		out = append(out, p.param(kv))
	}
	return out
}

func (p *parser) param(kv pair) *Param {
	prm := &Param{Name: kv.key, Type: ParamString, Pos: posOf(kv.k)}
	what := fmt.Sprintf("param %q", kv.key)
	if !paramRe.MatchString(kv.key) {
		p.errorf(kv.k, "invalid param name %q: use letters, digits, '_' and '-', starting with a letter or '_'", kv.key)
	}
	if v := resolve(kv.v); v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" {
		prm.Required = true // `name:` alone: a required string
		return prm
	}
	m, ok := p.mapping(kv.v, what)
	if !ok {
		return prm
	}
	p.unknown(m, "in "+what, paramFields, nil)
	if v := m.get("type"); v != nil {
		if t, ok := p.str(v, what+" type"); ok {
			if slices.Contains(paramTypes, t) {
				prm.Type = ParamType(t)
			} else {
				p.errorf(v, "%s: unknown type %q; use one of %s%s", what, t, strings.Join(paramTypes, ", "), didYouMean(t, paramTypes))
			}
		}
	}
	if v := m.opt("description"); v != nil {
		prm.Description, _ = p.str(v, what+" description")
	}
	required, hasRequired := false, false
	if v := m.get("required"); v != nil {
		required, hasRequired = p.bool(v, what+" required")
	}
	if v := m.get("default"); v != nil {
		prm.HasDefault = true
		prm.Default = p.paramDefault(prm, v)
		if hasRequired && required {
			p.errorf(v, "%s is required and has a default; drop one", what)
		}
	} else if hasRequired && !required {
		// Optional with no default: its value is null.
		prm.HasDefault = true
	}
	prm.Required = !prm.HasDefault
	return prm
}

// paramDefault decodes a param's default as its declared type. A string
// param takes any scalar's text as written, so `default: 1.10` is "1.10"
// and not the number 1.1.
func (p *parser) paramDefault(prm *Param, n *yaml.Node) any {
	n = resolve(n)
	what := fmt.Sprintf("param %q default", prm.Name)
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil
	}
	if prm.Type == ParamString && n.Kind == yaml.ScalarNode {
		if !p.standardTag(n, what) {
			return nil
		}
		return n.Value
	}
	v, ok := p.value(n, what)
	if !ok {
		return nil
	}
	c, err := coerceParam(prm.Type, v)
	if err != nil {
		p.errorf(n, "%s: %v", what, err)
		return nil
	}
	return c
}

func (p *parser) defaults(n *yaml.Node) Defaults {
	d := Defaults{Pos: posOf(resolve(n))}
	m, ok := p.mapping(n, "defaults")
	if !ok {
		return d
	}
	p.unknown(m, "in defaults", defaultFields, nil)
	if v := m.opt("retry"); v != nil {
		d.Retry = p.retry(v, "defaults.retry")
		d.Retry.Pos = m.keyPos("retry")
	}
	if v := m.get("timeout"); v != nil {
		d.Timeout = p.timeout(v, "defaults.timeout")
	}
	if v := m.get("heartbeat"); v != nil {
		if h, ok := p.duration(v, "defaults.heartbeat"); ok {
			d.Heartbeat = &h
		}
	}
	if v := m.get("queue"); v != nil {
		if q, ok := p.str(v, "defaults.queue"); ok {
			d.Queue = &q
		}
	}
	if v := m.get("cache"); v != nil {
		d.Cache = p.cache(v, "defaults.cache")
	}
	return d
}

func (p *parser) timeout(n *yaml.Node, what string) *time.Duration {
	d, ok := p.duration(n, what)
	if !ok {
		return nil
	}
	if d == 0 {
		p.errorf(n, "%s must be positive", what)
		return nil
	}
	return &d
}

// retry decodes a retry block. Ranges are checked here; the order of the
// two intervals is checked after merging, by Validate.
func (p *parser) retry(n *yaml.Node, what string) RetrySpec {
	r := RetrySpec{Pos: posOf(resolve(n))}
	m, ok := p.mapping(n, what)
	if !ok {
		return r
	}
	p.unknown(m, "in "+what, retryFields, nil)
	if v := m.get("max_attempts"); v != nil {
		if i, ok := p.int(v, what+".max_attempts"); ok {
			if i < 1 {
				p.errorf(v, "%s.max_attempts must be at least 1, got %d", what, i)
			} else {
				r.MaxAttempts = &i
			}
		}
	}
	for _, f := range []struct {
		key string
		dst **time.Duration
	}{{"initial_interval", &r.InitialInterval}, {"max_interval", &r.MaxInterval}} {
		v := m.get(f.key)
		if v == nil {
			continue
		}
		if d, ok := p.duration(v, what+"."+f.key); ok {
			if d <= 0 {
				p.errorf(v, "%s.%s must be positive", what, f.key)
			} else {
				*f.dst = &d
			}
		}
	}
	if v := m.get("backoff"); v != nil {
		if b, ok := p.number(v, what+".backoff"); ok {
			if b < 1 {
				p.errorf(v, "%s.backoff must be at least 1, got %v", what, b)
			} else {
				r.Backoff = &b
			}
		}
	}
	if v := m.opt("non_retryable"); v != nil {
		r.NonRetryable, _, _ = p.stringList(v, what+".non_retryable")
	}
	return r
}
