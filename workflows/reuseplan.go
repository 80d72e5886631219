package workflows

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/runs"
)

// This file is a rerun's choice of the nodes it may take over from the
// earlier run, as plain functions of the two plans (no workflow calls),
// so that it is unit tested directly.

// reuseChoice is what a rerun decided about one node before checking its
// outputs: take over prior (reason empty), or run it, for reason.
type reuseChoice struct {
	prior  *runs.NodeState
	reason string
}

// selectReuse decides, for every node of plan in plan order, whether a
// rerun may take over the earlier run's result: only for a node that
// succeeded there, is neither a From node nor downstream of one, is not a
// foreach node, had no effect undone by an on_failure node, has the same
// definition in both plans (changeOf) and whose upstream nodes may all be
// taken over. A From node plan lacks is an error, before anything runs.
func selectReuse(plan, prior *dags.Plan, in *runs.Reuse) (map[string]reuseChoice, error) {
	edges := plan.Edges()
	for _, f := range in.From {
		if _, ok := edges.Index[f]; !ok {
			return nil, fmt.Errorf("--from %q: pipeline %s has no node %q (its nodes: %s)", f, plan.Pipeline, f, strings.Join(edges.IDs, ", "))
		}
	}
	// byFrom[i] is the --from node that node i is (or is downstream of).
	byFrom := make([]string, len(plan.Nodes))
	for _, f := range in.From {
		stack := []int{edges.Index[f]}
		for len(stack) > 0 {
			i := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if byFrom[i] != "" {
				continue
			}
			byFrom[i] = f
			stack = append(stack, edges.Dependents[i]...)
		}
	}
	earlier := map[string]*runs.NodeState{}
	for i := range in.Nodes {
		earlier[in.Nodes[i].ID] = &in.Nodes[i]
	}
	undone := map[string]string{}
	for _, c := range in.Compensations {
		if c.Status == runs.NodeSucceeded && c.Compensates != "" {
			undone[c.Compensates] = c.ID
		}
	}
	priorNodes := map[string]*dags.PlanNode{}
	for i := range prior.Nodes {
		priorNodes[prior.Nodes[i].ID] = &prior.Nodes[i]
	}

	out := make(map[string]reuseChoice, len(plan.Nodes))
	for i, n := range plan.Nodes {
		st, was := earlier[n.ID]
		pn := priorNodes[n.ID]
		var reason string
		switch {
		case byFrom[i] == n.ID:
			reason = "named by --from"
		case byFrom[i] != "":
			reason = "downstream of --from " + byFrom[i]
		case pn == nil:
			reason = fmt.Sprintf("not in run %s's pipeline", in.Run)
		case !was:
			reason = fmt.Sprintf("not run in run %s", in.Run)
		case st.Status != runs.NodeSucceeded:
			reason = fmt.Sprintf("%s in run %s", st.Status, in.Run)
		case n.Foreach != nil:
			reason = "a foreach node runs again"
		case undone[n.ID] != "":
			reason = fmt.Sprintf("run %s's on_failure node %s undid it", in.Run, undone[n.ID])
		default:
			reason = changeOf(plan, &n, prior, pn)
		}
		if reason == "" {
			for _, j := range edges.Needs[i] {
				if up := edges.IDs[j]; out[up].reason != "" {
					reason = "upstream node " + up + " runs again"
					break
				}
			}
		}
		if reason == "" {
			out[n.ID] = reuseChoice{prior: st}
		} else {
			out[n.ID] = reuseChoice{reason: reason}
		}
	}
	return out, nil
}

// changeOf says how node n of plan differs from node p of the earlier
// plan in what decides its result: its type, the values of the params
// its `with` and `when` read, its `with`, `when` or needs. Options that
// change how it runs but not what it computes (retry, timeout, queue)
// are left out. "" when nothing differs.
func changeOf(plan *dags.Plan, n *dags.PlanNode, prior *dags.Plan, p *dags.PlanNode) string {
	if n.Type != p.Type {
		return fmt.Sprintf("its type changed: %s -> %s", p.Type, n.Type)
	}
	var changed []string
	for _, name := range paramsRead(n) {
		was, now := prior.Params[name], plan.Params[name]
		if !sameJSON(was, now) {
			changed = append(changed, fmt.Sprintf("param %s %s -> %s", name, shortJSON(was), shortJSON(now)))
		}
	}
	if len(changed) > 0 {
		return strings.Join(changed, ", ")
	}
	switch {
	case !sameJSON(n.With, p.With):
		return "its with changed in the spec"
	case n.When != p.When:
		return "its when changed in the spec"
	case !slices.Equal(n.Needs, p.Needs):
		return "its needs changed in the spec"
	}
	return ""
}

// paramsRead are the params node n's `with` and `when` refer to, sorted.
func paramsRead(n *dags.PlanNode) []string {
	refs, _ := dags.Refs(n.With) // a plan's references parsed when it was compiled
	if n.When != "" {
		if w, err := dags.ParseWhen(n.When); err == nil {
			refs = append(refs, w.Refs()...)
		}
	}
	var names []string
	for _, r := range refs {
		if r.Kind == "params" && !slices.Contains(names, r.Name) {
			names = append(names, r.Name)
		}
	}
	slices.Sort(names)
	return names
}

// sameJSON compares two values as JSON: a plan decoded from a query and
// one compiled here hold numbers and maps in different Go types.
func sameJSON(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	if errA != nil || errB != nil {
		return reflect.DeepEqual(a, b)
	}
	var va, vb any
	if json.Unmarshal(ja, &va) != nil || json.Unmarshal(jb, &vb) != nil {
		return string(ja) == string(jb)
	}
	return reflect.DeepEqual(va, vb)
}

// shortJSON is a value for a reason: its JSON, cut at 40 bytes.
func shortJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(b) > 40 {
		return string(b[:37]) + "..."
	}
	return string(b)
}
