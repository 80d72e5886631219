package dags

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

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
		key := mergeSource{resolve(src), depth + 1}
		r, done := p.merged[key]
		if !done {
			r.m, r.ok = p.mappingDepth(src, what+" merge (<<)", depth+1)
			if p.merged == nil {
				p.merged = map[mergeSource]mergeResult{}
			}
			p.merged[key] = r
		}
		m, ok := r.m, r.ok
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
