package dags

import (
	"errors"
	"fmt"
)

// metrics runs a node type's CheckMetrics (a gate's thresholds against the
// metrics of the node it reads), with with as Check saw it.
func (v *validator) metrics(n *Node, t NodeType, w string, blockPos Pos, with map[string]any) {
	if t.CheckMetrics == nil {
		return
	}
	err := t.CheckMetrics(with, v.metricSource)
	if err == nil {
		return
	}
	for _, ce := range checkErrors(err) {
		pos := blockPos
		if fe, ok := asFieldError(ce); ok {
			pos = n.fieldPos(fe.Field, fe.Error(), blockPos)
		}
		v.at(pos, "%s: %v", w, ce)
	}
}

// metricSource says which metric names a `with` value holds when it is
// one reference to an output of a node whose type declares them
// (NodeType.Metrics); ok is false for anything else: a foreach node's
// outputs, a type that does not say, a node whose metrics its program
// chooses.
func (v *validator) metricSource(val any) (names []string, from string, ok bool) {
	s, isStr := val.(string)
	if !isStr || v.reg == nil {
		return nil, "", false
	}
	t, err := parseTemplate(s)
	if err != nil {
		return nil, "", false
	}
	r := t.single()
	if r == nil || r.Kind != "nodes" {
		return nil, "", false
	}
	target := v.s.Node(r.Name)
	if target == nil || target.Foreach != nil {
		return nil, "", false
	}
	tt, found := v.reg.Lookup(target.Type)
	if !found || tt.Metrics == nil {
		return nil, "", false
	}
	with, _ := knownWith(target.With, v.defaults())
	names, ok = tt.Metrics(r.Key, with)
	if !ok {
		return nil, "", false
	}
	return names, fmt.Sprintf("node %s (type %s)", target.ID, target.Type), true
}

func asFieldError(err error) (*FieldError, bool) { return errors.AsType[*FieldError](err) }
