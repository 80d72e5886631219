package dags

import (
	"gopkg.in/yaml.v3"
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

// tooLarge reports, once, that the spec expands past maxValues.
func (p *parser) tooLarge(n *yaml.Node, what string) {
	if !p.tooBig {
		p.tooBig = true
		p.errorf(n, "%s is too large (more than %d values after expanding aliases)", what, maxValues)
	}
}
