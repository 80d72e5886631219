package dags

import (
	"slices"
	"strings"
)

func (v *validator) ids() {
	v.nodes = map[string]*Node{}
	v.comps = map[string]*Node{}
	v.index = map[*Node]int{}
	first := map[string]*Node{}
	for _, group := range []struct {
		list []*Node
		byID map[string]*Node
	}{{v.s.Nodes, v.nodes}, {v.s.OnFailure, v.comps}} {
		for i, n := range group.list {
			v.index[n] = i
			if !idRe.MatchString(n.ID) {
				v.at(n.Pos, "invalid node id %q: use letters, digits, '_' and '-', starting with a letter", n.ID)
				continue
			}
			if n.Type == "" {
				v.at(n.Pos, "node %q: missing required field \"type\"", n.ID)
			}
			if f, dup := first[n.ID]; dup {
				v.at(n.Pos, "duplicate node id %q, also at line %d; ids must be unique across nodes and on_failure", n.ID, f.Pos.Line)
				continue
			}
			first[n.ID] = n
			group.byID[n.ID] = n
		}
	}
}

func needPos(n *Node, i int) Pos {
	if i < len(n.NeedsPos) {
		return n.NeedsPos[i]
	}
	return n.Pos
}

func (v *validator) needs(n *Node, onFailure bool) {
	w := nodeName(n, onFailure)
	listed := map[string]bool{}
	for i, need := range n.Needs {
		pos := needPos(n, i)
		switch {
		case need == n.ID:
			v.at(pos, "%s needs itself", w)
		case listed[need]:
			v.at(pos, "%s lists %q in needs twice", w, need)
		case !onFailure && v.nodes[need] == nil && v.comps[need] != nil:
			v.at(pos, "%s needs %q, which is an on_failure node; nodes cannot wait for compensation", w, need)
		case !onFailure && v.nodes[need] == nil:
			v.at(pos, "%s needs %q, which is not a node%s", w, need, didYouMean(need, ids(v.s.Nodes)))
		case onFailure && v.comps[need] == nil && v.nodes[need] != nil:
			v.at(pos, "%s needs %q, which is not an on_failure node; on_failure nodes may only need other on_failure nodes (the node they compensate has completed already)", w, need)
		case onFailure && v.comps[need] == nil:
			v.at(pos, "%s needs %q, which is not an on_failure node%s", w, need, didYouMean(need, ids(v.s.OnFailure)))
		}
		listed[need] = true
	}
}

// unknownNeed reports whether one of n's needs names no node of its list
// (needs reports it).
func (v *validator) unknownNeed(n *Node, onFailure bool) bool {
	for _, need := range n.Needs {
		if (!onFailure && v.nodes[need] == nil) || (onFailure && v.comps[need] == nil) {
			return true
		}
	}
	return false
}

func (v *validator) compensates(n *Node) {
	w := nodeName(n, true)
	pos := n.CompensatesPos
	if pos == (Pos{}) {
		pos = n.Pos
	}
	switch {
	case n.Compensates == "":
		v.at(pos, "%s: missing required field \"compensates\" (the id of the node it undoes)", w)
	case v.nodes[n.Compensates] == nil:
		v.at(pos, "%s compensates %q, which is not a node in nodes%s", w, n.Compensates, didYouMean(n.Compensates, ids(v.s.Nodes)))
	}
}

func ids(nodes []*Node) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.ID
	}
	return out
}

// cycles reports each cycle of needs once, as a path starting at its
// first node in file order, at that node's line.
func (v *validator) cycles(nodes []*Node, byID map[string]*Node) {
	const (
		unseen = iota
		onStack
		done
	)
	e := specEdges(nodes)
	state := make([]int, len(nodes))
	inReported := map[*Node]bool{}
	var stack []*Node
	var visit func(i int)
	visit = func(i int) {
		n := nodes[i]
		state[i] = onStack
		stack = append(stack, n)
		for _, j := range e.Needs[i] {
			if m := nodes[j]; byID[m.ID] != m || m == n {
				continue // an invalid id, or a self-need: reported by ids and needs
			}
			switch state[j] {
			case unseen:
				visit(j)
			case onStack:
				k := slices.Index(stack, nodes[j])
				v.cycle(slices.Clone(stack[k:]), inReported)
			}
		}
		stack = stack[:len(stack)-1]
		state[i] = done
	}
	for i, n := range nodes {
		if byID[n.ID] == n && state[i] == unseen {
			visit(i)
		}
	}
}

func (v *validator) cycle(cyc []*Node, inReported map[*Node]bool) {
	fresh := false
	for _, n := range cyc {
		fresh = fresh || !inReported[n]
		inReported[n] = true
	}
	if !fresh {
		return
	}
	// Start at the node that comes first in the file, so the same cycle
	// prints the same way whatever order the search found it in.
	start := 0
	for i, n := range cyc {
		if v.index[n] < v.index[cyc[start]] {
			start = i
		}
	}
	path := make([]string, 0, len(cyc)+1)
	for i := range cyc {
		path = append(path, cyc[(start+i)%len(cyc)].ID)
	}
	path = append(path, cyc[start].ID)
	v.at(cyc[start].Pos, "cycle: %s (each node needs the next)", strings.Join(path, " -> "))
}

// upstream returns the set of nodes that run before n and so whose
// outputs n may use: for a node, what it needs, transitively; for an
// on_failure node, the node it compensates and that node's upstream, and
// the on_failure nodes it needs, transitively.
func (v *validator) upstream(n *Node, onFailure bool) *upstreamSet {
	if !onFailure {
		return &upstreamSet{seen: map[string]bool{}, stack: []searchFrom{{n, v.nodes}}}
	}
	up := &upstreamSet{seen: map[string]bool{}, stack: []searchFrom{{n, v.comps}}}
	if c := v.nodes[n.Compensates]; c != nil {
		up.seen[c.ID] = true
		up.stack = append(up.stack, searchFrom{c, v.nodes})
	}
	return up
}

// upstreamSet answers whether a node is upstream of another, searching the
// needs graph only as far as the questions asked so far require. Most
// references name a direct need; building each node's whole upstream made
// validating a 5,000-node chain take seconds and a gigabyte of maps.
type upstreamSet struct {
	seen  map[string]bool
	stack []searchFrom // nodes whose needs are not yet in seen
}

type searchFrom struct {
	n    *Node
	byID map[string]*Node // the list n's needs name nodes of
}

func (u *upstreamSet) has(id string) bool {
	for !u.seen[id] && len(u.stack) > 0 {
		top := u.stack[len(u.stack)-1]
		u.stack = u.stack[:len(u.stack)-1]
		for _, need := range top.n.Needs {
			if m := top.byID[need]; m != nil && !u.seen[need] {
				u.seen[need] = true
				u.stack = append(u.stack, searchFrom{m, top.byID})
			}
		}
	}
	return u.seen[id]
}
