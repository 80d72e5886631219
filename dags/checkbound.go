package dags

import (
	"encoding/json"
	"maps"
	"slices"
)

// checkBound runs the node type's Check again once the run's params are
// bound, on the `with` block as the node will get it wherever a value is
// now known: Validate skipped every ${...}, so a limit that Check enforces
// (a train node's processes above the worker's) would otherwise be passed
// by `processes: ${params.processes}` and a param of 30. A value that
// still depends on the run (a node's output, ${item}) stays a reference,
// which Check skips as before. Only blocks that params changed are checked
// again.
func checkBound(e *errs, n *Node, t NodeType, bound map[string]any, outs map[string]map[string]ParamType, pos Pos) {
	if t.Check == nil {
		return
	}
	// A param bound to nothing (no default, none given: what a spec's
	// validation without params binds) is still the run's to give.
	known := make(map[string]any, len(bound))
	for k, v := range bound {
		if v != nil {
			known[k] = v
		}
	}
	fields := t.FieldTypes()
	with := make(map[string]any, len(n.With))
	changed := false
	for _, k := range slices.Sorted(maps.Keys(n.With)) {
		raw := n.With[k]
		with[k] = deepCopy(raw)
		if !HasRef(raw) {
			continue
		}
		static, _ := staticWith(map[string]any{k: raw}, known, outs).(map[string]any)
		if static == nil || stillUnknown(static[k]) {
			continue
		}
		conv, err := ConvertWith(fields, map[string]any{k: raw}, static)
		if err != nil {
			continue // checkConversions said why
		}
		// As the node's activity gets it: JSON, numbers as float64.
		b, err := json.Marshal(conv[k])
		if err != nil {
			continue
		}
		var v any
		if json.Unmarshal(b, &v) != nil {
			continue
		}
		with[k], changed = v, true
	}
	if !changed {
		return
	}
	if err := t.Check(with); err != nil {
		for _, ce := range checkErrors(err) {
			e.at(pos, "node %s (type %s): %v", n.ID, n.Type, ce)
		}
	}
}

// stillUnknown reports whether v, a value staticWith made, holds a part
// only the run knows.
func stillUnknown(v any) bool {
	switch x := v.(type) {
	case unknown, declared:
		return true
	case map[string]any:
		for _, item := range x {
			if stillUnknown(item) {
				return true
			}
		}
	case []any:
		return slices.ContainsFunc(x, stillUnknown)
	}
	return false
}
