package dags

import (
	"fmt"
	"slices"
	"strings"
)

// Foreach fans a node out over a list: one instance of the node per item,
// named ID[i] in results, each with ${item} and ${item_index} bound in its
// `with` and `when`. The node's outputs are its instances' outputs in order
// (see ForeachOutputs).
type Foreach struct {
	Expr        string // a single ${...} reference that gives a list
	MaxParallel int    // instances running at once; 0: the spec's parallelism
	FailFast    bool   // stop starting instances after one fails
	Pos         Pos    // the foreach key's value
	MaxPos      Pos    // the max_parallel value; zero if absent
}

// PlanForeach is a node's fan-out as the plan records it.
type PlanForeach struct {
	Expr        string `json:"expr"`
	MaxParallel int    `json:"max_parallel"`        // >= 1
	FailFast    bool   `json:"fail_fast,omitempty"` // false in JSON: run every instance
}

// Item is the foreach instance references resolve ${item} and
// ${item_index} against.
type Item struct {
	Value any
	Index int
}

// Keys of a foreach node's outputs: the instances' outputs maps in item
// order (a skipped instance gives an empty map), and how many there were.
const (
	ForeachItems = "items"
	ForeachCount = "count"
)

// ForeachOutputs are the output keys every foreach node has, whatever its
// type: ${nodes.ID.outputs.items} is the list of its instances' outputs.
var ForeachOutputs = []string{ForeachItems, ForeachCount}

// InstanceID names the i-th instance of a foreach node: "train[3]".
func InstanceID(id string, i int) string { return fmt.Sprintf("%s[%d]", id, i) }

func itemRef(raw, name, key string) (Ref, error) {
	if name == "item_index" && key != "" {
		return Ref{}, fmt.Errorf("unknown reference %q; ${item_index} is a number and has no keys", raw)
	}
	return Ref{Kind: "item", Name: name, Key: key}, nil
}

func itemRefString(r Ref) string {
	if r.Key != "" {
		return "${" + r.Name + "." + r.Key + "}"
	}
	return "${" + r.Name + "}"
}

// lookup resolves ${item}, ${item.KEY} and ${item_index}.
func (it *Item) lookup(r Ref) (any, error) {
	if it == nil {
		return nil, fmt.Errorf("%s: only a foreach node's with and when can use it", r)
	}
	if r.Name == "item_index" {
		return it.Index, nil
	}
	if r.Key == "" {
		return it.Value, nil
	}
	m, ok := it.Value.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: item %d is %s, not a mapping", r, it.Index, typeName(it.Value))
	}
	v, ok := m[r.Key]
	if !ok {
		return nil, fmt.Errorf("%s: item %d has no key %q", r, it.Index, r.Key)
	}
	return v, nil
}

// foreach parses a node's foreach, max_parallel and fail_fast keys.
func (p *parser) foreach(node *Node, m mapping, what string) {
	v := m.get("foreach")
	if v == nil {
		for _, key := range []string{"max_parallel", "fail_fast"} {
			if x := m.get(key); x != nil {
				p.errorf(x, "%s: %s needs foreach", what, key)
			}
		}
		return
	}
	if strings.HasPrefix(what, "on_failure") {
		p.errorf(v, "%s: an on_failure node cannot have foreach", what)
		return
	}
	expr, ok := p.str(v, what+" foreach")
	if !ok {
		return
	}
	f := &Foreach{Expr: expr, FailFast: true, Pos: posOf(resolve(v))}
	if x := m.get("max_parallel"); x != nil {
		f.MaxPos = posOf(resolve(x))
		if n, ok := p.int(x, what+" max_parallel"); ok {
			if n < 1 {
				p.errorf(x, "%s: max_parallel must be at least 1, got %d", what, n)
			}
			f.MaxParallel = n
		}
	}
	if x := m.get("fail_fast"); x != nil {
		if b, ok := p.bool(x, what+" fail_fast"); ok {
			f.FailFast = b
		}
	}
	node.Foreach = f
}

// foreach validates a node's fan-out: the expression is one reference to a
// param or an upstream output (or a function of them), which the run
// evaluates to a list.
func (v *validator) foreach(n *Node) {
	f := n.Foreach
	if f == nil {
		return
	}
	w := nodeName(n, false)
	pos := f.Pos
	if pos == (Pos{}) {
		pos = n.Pos
	}
	t, err := parseTemplate(f.Expr)
	if err != nil {
		v.at(pos, "%s: foreach: %v", w, err)
		return
	}
	if len(t) != 1 || t[0].lit != "" {
		v.at(pos, "%s: foreach must be one ${...} reference or expression that gives a list, such as ${params.markets}; got %q", w, f.Expr)
		return
	}
	refs, err := Refs(f.Expr)
	if err != nil {
		v.at(pos, "%s: foreach: %v", w, err)
		return
	}
	up := v.upstream(n, false)
	for _, r := range refs {
		if r.Kind == "item" {
			v.at(pos, "%s: foreach cannot use %s; it is what foreach defines", w, r)
			continue
		}
		if p := v.s.Param(r.Name); r.Kind == "params" && p != nil && p.Type != ParamList && t.single() != nil {
			v.at(pos, "%s: foreach over params.%s, which is a %s; foreach needs a list", w, r.Name, p.Type)
			continue
		}
		v.ref(n, false, r, pos, up)
	}
}

// itemRef checks a ${item...} reference: only a foreach node may use one.
func (v *validator) itemRef(n *Node, onFailure bool, r Ref, pos Pos) {
	if onFailure || n.Foreach == nil {
		v.at(pos, "%s uses %s, but it has no foreach; only a foreach node's with and when can use it", nodeName(n, onFailure), r)
	}
}

// foreachOutput checks a reference to an output of a foreach node: it has
// only ForeachOutputs, whatever its type.
func (v *validator) foreachOutput(w string, target *Node, r Ref, pos Pos) {
	if !slices.Contains(ForeachOutputs, r.Key) {
		v.at(pos, "%s references nodes.%s.outputs.%s, but node %s is a foreach node; its outputs are %s (the list of its instances' outputs, and their number)",
			w, r.Name, r.Key, r.Name, strings.Join(ForeachOutputs, ", "))
	}
}
