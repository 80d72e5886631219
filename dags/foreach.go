package dags

// Foreach fans a node out over a list. (Issue 11: to be filled in.)
type Foreach struct {
	Expr string
	Pos  Pos
}

// foreach parses a node's foreach, max_parallel and fail_fast keys.
func (p *parser) foreach(node *Node, m mapping, what string) {
	for _, key := range []string{"foreach", "max_parallel", "fail_fast"} {
		if v := m.get(key); v != nil {
			p.errorf(v, "%s: %s is not supported yet", what, key)
		}
	}
}

// foreach validates a node's fan-out.
func (v *validator) foreach(n *Node) {}
