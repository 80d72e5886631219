package dags

import (
	"fmt"
	"strings"
)

// Mermaid renders the spec as a Mermaid flowchart: a box per node with its
// id and type, an arrow per need, arrows into a conditional node labelled
// with its condition, and on_failure nodes in a subgraph, each joined to
// the node it compensates by a dotted arrow. Mermaid node names are n1,
// n2, ... in file order, because node ids such as "end" or "a-b" are not
// safe there; the ids show in the labels.
func (s *Spec) Mermaid() string {
	g := s.graph()
	var b strings.Builder
	b.WriteString("flowchart TD\n")
	mid := func(i int) string { return fmt.Sprintf("n%d", i+1) }
	for i, n := range g.nodes {
		if i == len(s.Nodes) {
			b.WriteString("    subgraph on_failure\n")
		}
		indent := "    "
		if i >= len(s.Nodes) {
			indent += "    "
		}
		fmt.Fprintf(&b, "%s%s[\"%s (%s)\"]\n", indent, mid(i), mermaidText(n.ID), mermaidText(n.Type))
	}
	if len(s.OnFailure) > 0 {
		b.WriteString("    end\n")
	}
	for _, e := range g.edges {
		switch {
		case e.compensates:
			fmt.Fprintf(&b, "    %s -.->|compensates| %s\n", mid(e.from), mid(e.to))
		case e.when != "":
			fmt.Fprintf(&b, "    %s -->|\"%s\"| %s\n", mid(e.from), mermaidText(e.when), mid(e.to))
		default:
			fmt.Fprintf(&b, "    %s --> %s\n", mid(e.from), mid(e.to))
		}
	}
	return b.String()
}

// mermaidText escapes text for a quoted Mermaid label, where quotes, angle
// brackets and pipes would end the label or be read as HTML.
var mermaidText = strings.NewReplacer(
	"#", "#35;",
	`"`, "#quot;",
	"<", "#lt;",
	">", "#gt;",
	"&", "#amp;",
	"|", "#124;",
	"\n", " ",
).Replace

// Dot renders the spec as a Graphviz digraph, with the same shapes as
// Mermaid: solid edges for needs, dashed and labelled ones into conditional
// nodes, on_failure nodes in a dashed cluster joined to the node they
// compensate by dotted edges.
func (s *Spec) Dot() string {
	g := s.graph()
	var b strings.Builder
	fmt.Fprintf(&b, "digraph %s {\n", dotQuote(s.Name))
	b.WriteString("    node [shape=box];\n")
	for i, n := range g.nodes {
		if i == len(s.Nodes) {
			b.WriteString("    subgraph cluster_on_failure {\n        label=\"on_failure\";\n        style=dashed;\n")
		}
		indent := "    "
		if i >= len(s.Nodes) {
			indent += "    "
		}
		fmt.Fprintf(&b, "%s%s [label=%s];\n", indent, dotQuote(n.ID), dotQuote(n.ID+"\n"+n.Type))
	}
	if len(s.OnFailure) > 0 {
		b.WriteString("    }\n")
	}
	for _, e := range g.edges {
		from, to := dotQuote(g.nodes[e.from].ID), dotQuote(g.nodes[e.to].ID)
		switch {
		case e.compensates:
			fmt.Fprintf(&b, "    %s -> %s [style=dotted, label=\"compensates\"];\n", from, to)
		case e.when != "":
			fmt.Fprintf(&b, "    %s -> %s [style=dashed, label=%s];\n", from, to, dotQuote(e.when))
		default:
			fmt.Fprintf(&b, "    %s -> %s;\n", from, to)
		}
	}
	b.WriteString("}\n")
	return b.String()
}

// dotQuote quotes s as a DOT string; a newline becomes DOT's \n line break.
func dotQuote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
}

// graph is what both renderings draw: nodes (then on_failure nodes) in file
// order, and edges in the order of the nodes they lead to.
type graph struct {
	nodes []*Node
	edges []edge
}

type edge struct {
	from, to    int // indexes into nodes
	when        string
	compensates bool
}

// graph works on specs that have not been validated too, so that a broken
// file can still be drawn: needs that name nothing are left out.
func (s *Spec) graph() graph {
	g := graph{nodes: append(append([]*Node{}, s.Nodes...), s.OnFailure...)}
	nodes, comps := specEdges(s.Nodes), specEdges(s.OnFailure)
	for i, n := range g.nodes {
		e, offset := nodes, 0
		if i >= len(s.Nodes) {
			e, offset = comps, len(s.Nodes)
			if c, ok := nodes.Index[n.Compensates]; ok {
				g.edges = append(g.edges, edge{from: c, to: i, compensates: true})
			}
		}
		for _, j := range e.Needs[i-offset] {
			g.edges = append(g.edges, edge{from: offset + j, to: i, when: n.When})
		}
	}
	return g
}

// Edges are the needs between a list of nodes, by position in the list.
// They are built here only, from a spec or a plan, for every user of the
// graph: validation, ordering, drawing, the Pipeline workflow and the run
// report.
type Edges struct {
	IDs   []string       // the nodes' ids, in list order
	Index map[string]int // id -> position; the first of duplicate ids
	// Needs[i] are the nodes node i needs, in the order it lists them;
	// needs naming no node of the list, and repeats, are left out.
	Needs [][]int
	// Dependents[i] are the nodes that need node i, in list order.
	Dependents [][]int
}

// NeedsOf returns the ids of the nodes id needs; none for an unknown id.
func (e Edges) NeedsOf(id string) []string {
	i, ok := e.Index[id]
	if !ok {
		return nil
	}
	out := make([]string, len(e.Needs[i]))
	for k, j := range e.Needs[i] {
		out[k] = e.IDs[j]
	}
	return out
}

// Edges returns the edges between the plan's nodes (not its on_failure
// nodes, which run in completion order instead).
func (p *Plan) Edges() Edges {
	return buildEdges(len(p.Nodes), func(i int) (string, []string) { return p.Nodes[i].ID, p.Nodes[i].Needs })
}

// specEdges returns the edges between nodes of a spec, validated or not.
func specEdges(nodes []*Node) Edges {
	return buildEdges(len(nodes), func(i int) (string, []string) { return nodes[i].ID, nodes[i].Needs })
}

func buildEdges(n int, node func(i int) (id string, needs []string)) Edges {
	e := Edges{IDs: make([]string, n), Index: make(map[string]int, n), Needs: make([][]int, n), Dependents: make([][]int, n)}
	for i := range n {
		id, _ := node(i)
		e.IDs[i] = id
		if _, dup := e.Index[id]; !dup {
			e.Index[id] = i
		}
	}
	listed := make([]int, n) // listed[j] == i+1: node i needs j already
	for i := range n {
		_, needs := node(i)
		for _, need := range needs {
			j, ok := e.Index[need]
			if !ok || listed[j] == i+1 {
				continue
			}
			listed[j] = i + 1
			e.Needs[i] = append(e.Needs[i], j)
			e.Dependents[j] = append(e.Dependents[j], i)
		}
	}
	return e
}
