package dags

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// RunValues are the values ${run.NAME} gives: facts about the run, fixed
// when it starts (the workflow computes them from its start event, so
// replay gives the same).
type RunValues struct {
	ID          string // ${run.id}: the run id (the workflow id)
	Pipeline    string // ${run.pipeline}: the pipeline's name
	LogicalTime string // ${run.logical_time}: the time the run is for, RFC 3339
	LogicalDate string // ${run.logical_date}: its date, YYYY-MM-DD, in the run's time zone
	// Timezone is the run's time zone (its schedule's), "" for UTC: sent
	// to nodes (nodetype.Input.Timezone), not a ${run.NAME}.
	Timezone string `json:",omitempty"`
}

// RunValueNames are the names ${run.NAME} takes, in documentation order.
var RunValueNames = []string{"id", "pipeline", "logical_time", "logical_date"}

func (rv *RunValues) lookup(r Ref) (any, error) {
	if rv == nil {
		return nil, fmt.Errorf("%s: run values are not known here", r)
	}
	switch r.Name {
	case "id":
		return rv.ID, nil
	case "pipeline":
		return rv.Pipeline, nil
	case "logical_time":
		return rv.LogicalTime, nil
	case "logical_date":
		return rv.LogicalDate, nil
	}
	return nil, fmt.Errorf("%s: no run value %q; run values are %s", r, r.Name, strings.Join(RunValueNames, ", "))
}

// runRef checks a ${run.NAME} reference at validation time.
func (v *validator) runRef(n *Node, onFailure bool, r Ref, pos Pos) {
	if !slices.Contains(RunValueNames, r.Name) {
		v.at(pos, "%s references run.%s, which is not a run value%s; run values are %s",
			nodeName(n, onFailure), r.Name, didYouMean(r.Name, RunValueNames), strings.Join(RunValueNames, ", "))
	}
}

// checkParamRefs reports a param value that holds references other than
// run values: a param's value is fixed when the run starts, before any
// node ran, and params cannot refer to one another.
func checkParamRefs(name string, v any) error {
	s, ok := v.(string)
	if !ok || !HasRef(s) {
		return nil
	}
	refs, err := Refs(s)
	if err != nil {
		return fmt.Errorf("param %q: %v", name, err)
	}
	for _, r := range refs {
		if r.Kind != "run" {
			return fmt.Errorf("param %q: %s: a param's value may use run values and date functions (e.g. ${date_add(run.logical_date, -1)}), not %s", name, s, r)
		}
	}
	return nil
}

// ResolveRunParams evaluates the params whose values hold run values, such
// as a schedule's `end_date: ${date_add(run.logical_date, -1)}`, now that
// the run's logical time is known. Other params are returned as they are;
// params is not changed, and it is returned itself when no param held a
// run value (changed false).
func ResolveRunParams(params map[string]any, rv *RunValues) (_ map[string]any, changed bool, _ error) {
	var out map[string]any
	// One budget for them all: together they must fit a payload too
	// (limits.go).
	budget := &evalBudget{}
	for _, name := range slices.Sorted(maps.Keys(params)) {
		s, ok := params[name].(string)
		if !ok || !HasRef(s) {
			continue
		}
		v, err := Interpolate(s, Scope{Run: rv, budget: budget})
		if err != nil {
			return nil, false, fmt.Errorf("param %q: %w", name, err)
		}
		if out == nil {
			out = maps.Clone(params)
		}
		out[name] = v
	}
	if out == nil {
		return params, false, nil
	}
	return out, true, nil
}
