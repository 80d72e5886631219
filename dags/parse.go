package dags

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
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
	topFields     = []string{"name", "description", "params", "defaults", "parallelism", "schedules", "nodes", "on_failure"}
	paramFields   = []string{"type", "default", "required", "description"}
	defaultFields = []string{"retry", "timeout", "heartbeat", "queue"}
	retryFields   = []string{"max_attempts", "initial_interval", "backoff", "max_interval", "non_retryable"}
	nodeFields    = []string{"id", "type", "description", "needs", "when", "foreach", "max_parallel", "fail_fast", "with", "outputs", "retry", "timeout", "heartbeat", "queue"}
	compFields    = append(append([]string{}, nodeFields...), "compensates")
)

// Limits on what a spec may make the parser do. Aliases let a small file
// describe a huge or cyclic value, and the walk expands them. A spec can
// come from anyone who can start a run, and the worker parses it: these
// bound its time and memory. (YAML's own nesting is bounded by yaml.v3,
// at 10,000 levels; conditions by the limits in when.go.)
const (
	maxDepth     = 64
	maxValues    = 1 << 20
	maxSpecBytes = 1 << 20 // a spec's text
	// Nodes plus on_failure nodes. A plan is one Temporal payload (2 MiB
	// at most), at ~230 bytes a node before any with.
	maxNodes = 5000
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
}

func posOf(n *yaml.Node) Pos { return Pos{n.Line, n.Column} }

func (p *parser) errorf(n *yaml.Node, format string, args ...any) {
	p.at(posOf(n), format, args...)
}

var yamlLineRe = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

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

func (p *parser) syntaxError(err error) {
	msg := err.Error()
	if m := yamlLineRe.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		p.at(Pos{Line: line}, "syntax error: %s", m[2])
		return
	}
	// Some errors (bad encoding) come without a line; better none than a
	// wrong one.
	p.at(Pos{}, "syntax error: %s", strings.TrimPrefix(msg, "yaml: "))
}

// resolve follows aliases to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < maxDepth; i++ {
		n = n.Alias
	}
	return n
}

// kind names a node's kind the way a spec author thinks of it.
func kind(n *yaml.Node) string {
	n = resolve(n)
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!bool":
			return "bool"
		case "!!int", "!!float":
			return "number"
		}
		return "string"
	}
	return "document"
}

// pair is one entry of a mapping; mapping keeps file order.
type pair struct {
	key  string
	k, v *yaml.Node
}

type mapping []pair

// keyPos returns the position of a key, which is where messages about a
// block should point: a block mapping's value starts a line below.
func (m mapping) keyPos(key string) Pos {
	for _, kv := range m {
		if kv.key == key {
			return posOf(kv.k)
		}
	}
	return Pos{}
}

// opt is get for optional blocks, where an empty value (`with:` with its
// entries commented out) means the same as leaving the key out.
func (m mapping) opt(key string) *yaml.Node {
	v := m.get(key)
	if v != nil {
		if r := resolve(v); r.Kind == yaml.ScalarNode && r.ShortTag() == "!!null" {
			return nil
		}
	}
	return v
}

func (m mapping) get(key string) *yaml.Node {
	for _, kv := range m {
		if kv.key == key {
			return kv.v
		}
	}
	return nil
}

// mapping returns the entries of a mapping node, reporting repeated keys and
// expanding merge keys (<<: *anchor), where explicit keys win.
func (p *parser) mapping(n *yaml.Node, what string) (mapping, bool) {
	return p.mappingDepth(n, what, 0)
}

func (p *parser) mappingDepth(n *yaml.Node, what string, depth int) (mapping, bool) {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "%s must be a mapping, got %s", what, kind(n))
		return nil, false
	}
	if depth > maxDepth {
		p.errorf(n, "%s is nested too deeply", what)
		return nil, false
	}
	// Merge keys are expanded for every mapping that uses them, so a
	// small file can ask for a mapping built from billions of others:
	// entries count against the same budget as values.
	if p.values += len(n.Content) / 2; p.values > maxValues {
		p.tooLarge(n, what)
		return nil, false
	}
	var m, merged mapping
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			p.errorf(k, "%s: keys must be strings, got %s", what, kind(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			merged = append(merged, p.merge(v, what, depth)...)
			continue
		}
		if first, dup := seen[k.Value]; dup {
			p.errorf(k, "%s: key %q repeated (first at line %d)", what, k.Value, first.Line)
			continue
		}
		seen[k.Value] = k
		m = append(m, pair{k.Value, k, v})
	}
	for _, kv := range merged {
		if _, ok := seen[kv.key]; !ok {
			seen[kv.key] = kv.k
			m = append(m, kv)
		}
	}
	return m, true
}

// merge returns the entries a merge key brings in: a mapping or a list of
// them, earlier ones winning.
func (p *parser) merge(v *yaml.Node, what string, depth int) mapping {
	v = resolve(v)
	var srcs []*yaml.Node
	if v.Kind == yaml.SequenceNode {
		srcs = v.Content
	} else {
		srcs = []*yaml.Node{v}
	}
	var out mapping
	have := map[string]bool{}
	for _, src := range srcs {
		m, ok := p.mappingDepth(src, what+" merge (<<)", depth+1)
		if !ok {
			continue
		}
		for _, kv := range m {
			if !have[kv.key] {
				have[kv.key] = true
				out = append(out, kv)
			}
		}
	}
	return out
}

// unknown reports keys of m not in known, suggesting the closest. where
// says where the key is, e.g. `in node "b"`. hint, if not nil, may give a
// better message for a key (a key valid elsewhere).
func (p *parser) unknown(m mapping, where string, known []string, hint func(key string) string) {
	for _, kv := range m {
		if slices.Contains(known, kv.key) {
			continue
		}
		if hint != nil {
			if h := hint(kv.key); h != "" {
				p.errorf(kv.k, "unknown field %q %s (%s)", kv.key, where, h)
				continue
			}
		}
		p.errorf(kv.k, "unknown field %q %s%s", kv.key, where, didYouMean(kv.key, known))
	}
}

// str decodes a string. Any non-null scalar is accepted as its text, so
// that `description: 2026` or `when: true` mean what they look like.
func (p *parser) str(n *yaml.Node, what string) (string, bool) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" {
		p.errorf(n, "%s must be a string, got %s", what, kind(n))
		return "", false
	}
	if !p.standardTag(n, what) {
		return "", false
	}
	return n.Value, true
}

// standardTag reports whether n has one of YAML's own tags, and reports an
// error if not. A custom tag is almost always an accident: in
// `when: !${nodes.a.outputs.ok}` the "!" starts a tag, leaving the value
// empty, and an empty condition would silently mean "always".
func (p *parser) standardTag(n *yaml.Node, what string) bool {
	if tag := n.ShortTag(); !strings.HasPrefix(tag, "!!") {
		p.errorf(n, "%s: unsupported YAML tag %s (a value starting with ! must be quoted)", what, tag)
		return false
	}
	return true
}

func (p *parser) int(n *yaml.Node, what string) (int, bool) {
	n = resolve(n)
	var i int
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&i) != nil {
		p.errorf(n, "%s must be an integer, got %s", what, describe(n))
		return 0, false
	}
	return i, true
}

func (p *parser) number(n *yaml.Node, what string) (float64, bool) {
	n = resolve(n)
	var f float64
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") ||
		n.Decode(&f) != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		p.errorf(n, "%s must be a number, got %s", what, describe(n))
		return 0, false
	}
	return f, true
}

func (p *parser) bool(n *yaml.Node, what string) (bool, bool) {
	n = resolve(n)
	var b bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&b) != nil {
		p.errorf(n, "%s must be true or false, got %s", what, describe(n))
		return false, false
	}
	return b, true
}

func (p *parser) duration(n *yaml.Node, what string) (time.Duration, bool) {
	s, ok := p.str(n, what)
	if !ok {
		return 0, false
	}
	d, err := ParseDuration(s)
	if err != nil {
		p.errorf(n, "%s: %v", what, err)
		return 0, false
	}
	return d, true
}

// stringList decodes a list of strings. An empty list gives a non-nil slice,
// so that callers can tell "set to none" from "not set".
func (p *parser) stringList(n *yaml.Node, what string) ([]string, []Pos, bool) {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "%s must be a list of strings, got %s", what, kind(n))
		return nil, nil, false
	}
	out, pos, ok := []string{}, []Pos{}, true
	for _, item := range n.Content {
		item = resolve(item)
		if item.Kind != yaml.ScalarNode || item.ShortTag() == "!!null" {
			p.errorf(item, "%s must be a list of strings, got a %s item", what, kind(item))
			ok = false
			continue
		}
		if !p.standardTag(item, what) {
			ok = false
			continue
		}
		out = append(out, item.Value)
		pos = append(pos, posOf(item))
	}
	return out, pos, ok
}

// describe names a node for a "got ..." message: its kind, and the text of
// a scalar.
func describe(n *yaml.Node) string {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && n.ShortTag() != "!!null" {
		return fmt.Sprintf("%s %q", kind(n), n.Value)
	}
	return kind(n)
}

// value decodes any YAML value into the JSON shapes Go code expects:
// map[string]any, []any, string, bool, int, float64 or nil.
func (p *parser) value(n *yaml.Node, what string) (any, bool) {
	return p.valueDepth(n, what, 0)
}

func (p *parser) valueDepth(n *yaml.Node, what string, depth int) (any, bool) {
	n = resolve(n)
	p.values++
	switch {
	case depth > maxDepth:
		p.errorf(n, "%s is nested too deeply (a YAML alias that contains itself?)", what)
		return nil, false
	case p.values > maxValues:
		p.tooLarge(n, what)
		return nil, false
	}
	switch n.Kind {
	case yaml.MappingNode:
		m, ok := p.mappingDepth(n, what, depth)
		out := make(map[string]any, len(m))
		for _, kv := range m {
			v, vok := p.valueDepth(kv.v, what, depth+1)
			out[kv.key] = v
			ok = ok && vok
		}
		return out, ok
	case yaml.SequenceNode:
		out, ok := make([]any, 0, len(n.Content)), true
		for _, item := range n.Content {
			v, vok := p.valueDepth(item, what, depth+1)
			out = append(out, v)
			ok = ok && vok
		}
		return out, ok
	case yaml.ScalarNode:
		return p.scalar(n, what)
	}
	p.errorf(n, "%s: unexpected YAML node", what)
	return nil, false
}

// tooLarge reports, once, that the spec expands past maxValues.
func (p *parser) tooLarge(n *yaml.Node, what string) {
	if !p.tooBig {
		p.tooBig = true
		p.errorf(n, "%s is too large (more than %d values after expanding aliases)", what, maxValues)
	}
}

func (p *parser) scalar(n *yaml.Node, what string) (any, bool) {
	switch tag := n.ShortTag(); tag {
	case "!!null":
		return nil, true
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			break
		}
		return b, true
	case "!!int":
		var i int
		if err := n.Decode(&i); err != nil {
			p.errorf(n, "%s: integer %s out of range", what, n.Value)
			return nil, false
		}
		return i, true
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			break
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			p.errorf(n, "%s: %s is not a finite number (plans are JSON)", what, n.Value)
			return nil, false
		}
		return f, true
	case "!!str", "!!timestamp", "!!binary":
		// Timestamps stay text: "2026-01-01" is a date string to a pipeline.
		return n.Value, true
	default:
		p.standardTag(n, what)
		return nil, false
	}
	p.errorf(n, "%s: invalid %s value %q", what, kind(n), n.Value)
	return nil, false
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

func (p *parser) nodes(n *yaml.Node, what string, onFailure bool) []*Node {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "%s must be a list of nodes, got %s", what, kind(n))
		return nil
	}
	if p.nodeCount += len(n.Content); p.nodeCount > maxNodes {
		p.errorf(n, "too many nodes: %d with on_failure; the limit is %d", p.nodeCount, maxNodes)
		return nil
	}
	var out []*Node
	for i, item := range n.Content {
		if node := p.node(item, what, i, onFailure); node != nil {
			out = append(out, node)
		}
	}
	return out
}

func (p *parser) node(n *yaml.Node, list string, index int, onFailure bool) *Node {
	n = resolve(n)
	// Name the node by its id in messages, or by its place in the list
	// when it has none. The id is looked up before the mapping is decoded
	// so that errors in the mapping can name it too.
	what := fmt.Sprintf("%s entry #%d", list, index+1)
	if id := peekID(n); id != "" {
		what = fmt.Sprintf("node %q", id)
		if onFailure {
			what = "on_failure " + what
		}
	}
	m, ok := p.mapping(n, what)
	if !ok {
		return nil
	}
	node := &Node{Pos: posOf(n)}
	if v := m.get("id"); v != nil {
		if id, ok := p.str(v, what+" id"); ok {
			node.ID = id
			if !idRe.MatchString(id) {
				p.errorf(v, "invalid node id %q: use letters, digits, '_' and '-', starting with a letter", id)
			}
		}
	} else {
		p.errorf(n, "%s: missing required field \"id\"", what)
	}
	known, hint := nodeFields, func(key string) string {
		if key == "compensates" {
			return "compensates is for on_failure nodes"
		}
		return ""
	}
	if onFailure {
		known, hint = compFields, nil
	}
	p.unknown(m, "in "+what, known, hint)

	if v := m.get("type"); v != nil {
		node.TypePos = posOf(resolve(v))
		node.Type, _ = p.str(v, what+" type")
	} else {
		p.errorf(n, "%s: missing required field \"type\"", what)
	}
	if v := m.opt("description"); v != nil {
		node.Description, _ = p.str(v, what+" description")
	}
	if v := m.opt("needs"); v != nil {
		node.Needs, node.NeedsPos, _ = p.stringList(v, what+" needs")
	}
	if v := m.get("when"); v != nil {
		node.WhenPos = posOf(resolve(v))
		node.When, _ = p.str(v, what+" when")
	}
	p.foreach(node, m, what) // foreach.go: foreach, max_parallel, fail_fast
	if v := m.opt("with"); v != nil {
		node.WithPos = m.keyPos("with")
		node.With, node.WithKeyPos = p.with(v, what)
	}
	if v := m.get("outputs"); v != nil {
		node.OutputsPos = m.keyPos("outputs")
		node.Outputs, node.OutputKeyPos = p.outputs(v, what)
	}
	if v := m.opt("retry"); v != nil {
		node.Retry = p.retry(v, what+" retry")
		node.Retry.Pos = m.keyPos("retry")
	}
	if v := m.get("timeout"); v != nil {
		node.Timeout = p.timeout(v, what+" timeout")
	}
	if v := m.get("heartbeat"); v != nil {
		if h, ok := p.duration(v, what+" heartbeat"); ok {
			node.Heartbeat = &h
		}
	}
	if v := m.get("queue"); v != nil {
		if q, ok := p.str(v, what+" queue"); ok {
			node.Queue = &q
		}
	}
	if onFailure {
		if v := m.get("compensates"); v != nil {
			node.CompensatesPos = posOf(resolve(v))
			node.Compensates, _ = p.str(v, what+" compensates")
		} else {
			p.errorf(n, "%s: missing required field \"compensates\" (the id of the node it undoes)", what)
		}
	}
	return node
}

// peekID returns the id a node mapping declares, if it is a plain string.
func peekID(n *yaml.Node) string {
	if n.Kind != yaml.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		if k.Kind == yaml.ScalarNode && k.Value == "id" && v.Kind == yaml.ScalarNode && v.ShortTag() != "!!null" {
			return v.Value
		}
	}
	return ""
}

func (p *parser) with(n *yaml.Node, what string) (map[string]any, map[string]Pos) {
	m, ok := p.mapping(n, what+" with")
	if !ok {
		return nil, nil
	}
	with := make(map[string]any, len(m))
	pos := make(map[string]Pos, len(m))
	for _, kv := range m {
		v, _ := p.value(kv.v, fmt.Sprintf("%s with field %q", what, kv.key))
		with[kv.key] = v
		pos[kv.key] = posOf(kv.k)
	}
	return with, pos
}

// outputs decodes a node's declared outputs: a mapping of output names to
// types. An empty mapping (or `outputs:` alone) declares none, which still
// makes references to undeclared keys errors.
func (p *parser) outputs(n *yaml.Node, what string) (map[string]ParamType, map[string]Pos) {
	what += " outputs"
	out, pos := map[string]ParamType{}, map[string]Pos{}
	if r := resolve(n); r.Kind == yaml.ScalarNode && r.ShortTag() == "!!null" {
		return out, pos
	}
	m, ok := p.mapping(n, what)
	if !ok {
		return out, pos
	}
	for _, kv := range m {
		pos[kv.key] = posOf(kv.k)
		if !ValidOutputName(kv.key) {
			p.errorf(kv.k, "%s: invalid output name %q: %s", what, kv.key, OutputNameRule)
			continue
		}
		t, ok := p.str(kv.v, fmt.Sprintf("%s: %s type", what, kv.key))
		if !ok {
			continue
		}
		if !slices.Contains(outputTypes, t) {
			p.errorf(kv.v, "%s: %s: unknown type %q; use one of %s%s", what, kv.key, t, strings.Join(outputTypes, ", "), didYouMean(t, outputTypes))
			continue
		}
		out[kv.key] = ParamType(t)
	}
	return out, pos
}
