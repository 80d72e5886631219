package dags

import (
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

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
		node.WithPaths = withPaths(v)
	}
	if v := m.get("outputs"); v != nil {
		node.OutputsPos = m.keyPos("outputs")
		node.Outputs, node.OutputKeyPos = p.outputs(v, what)
	}
	if v := m.opt("wait_for"); v != nil {
		node.WaitFor = p.waitFor(v, what+" wait_for") // waitfor.go
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
	if v := m.get("cache"); v != nil {
		node.Cache = p.cache(v, what+" cache")
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

// Bounds on the nested positions a node records: they only place
// messages, so a huge or deeply nested `with` records what fits.
const (
	maxPathDepth = 6
	maxPaths     = 1024
)

// withPaths returns the positions of the values nested in a `with`
// block, by the path messages name them with: "checks[0]",
// "steps[2].percent", "metrics.auc". A mapping entry is placed at its
// key, a list item at the item.
func withPaths(n *yaml.Node) map[string]Pos {
	out := map[string]Pos{}
	var walk func(n *yaml.Node, path string, depth int)
	walk = func(n *yaml.Node, path string, depth int) {
		n = resolve(n)
		if depth > maxPathDepth {
			return
		}
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content) && len(out) < maxPaths; i += 2 {
				k := n.Content[i]
				if k.Kind != yaml.ScalarNode {
					continue
				}
				p := joinPath(path, k.Value)
				if depth > 0 {
					out[p] = posOf(k)
				}
				walk(n.Content[i+1], p, depth+1)
			}
		case yaml.SequenceNode:
			for i, item := range n.Content {
				if len(out) >= maxPaths {
					return
				}
				p := fmt.Sprintf("%s[%d]", path, i)
				out[p] = posOf(resolve(item))
				walk(item, p, depth+1)
			}
		}
	}
	walk(n, "", 0)
	return out
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
