package pipetest

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

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
