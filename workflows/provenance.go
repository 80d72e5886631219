package workflows

import (
	"slices"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/nodetype"
)

// provenance is what node is sent of where its inputs came from, for a
// node type that records it (dags.PlanNode.Provenance: deploy, canary);
// nil for the others, so their inputs stay as they were.
func (r *pipelineRun) provenance(node dags.PlanNode) *nodetype.Provenance {
	if !node.Provenance {
		return nil
	}
	p := &nodetype.Provenance{
		SpecDigest: r.plan.SpecDigest, Retrain: r.plan.Retrain,
		Params: r.plan.Params, ParamsDigest: r.plan.ParamsDigest,
	}
	if refs, err := dags.Refs(node.With["dir"]); err == nil {
		for _, ref := range refs {
			if ref.Kind == "nodes" {
				p.Trainer = ref.Name
				break
			}
		}
	}
	up := r.upstream(node.ID)
	for i, id := range r.edges.IDs {
		if !up[i] {
			continue
		}
		state := r.result.Nodes[i]
		run := r.result.ID
		switch {
		case state.ReusedFrom != "":
			run = state.ReusedFrom
		case state.Cache != nil && state.Cache.Hit && state.Cache.Run != "":
			run = state.Cache.Run // served from the node cache: computed there
		}
		p.Upstream = append(p.Upstream, nodetype.Origin{Node: id, Type: state.Type, Run: run, Key: r.keys[id]})
	}
	return p
}

// upstream marks, by plan position, every node id needs, directly or not.
func (r *pipelineRun) upstream(id string) []bool {
	up := make([]bool, len(r.edges.IDs))
	i, ok := r.index[id]
	if !ok {
		return up
	}
	stack := slices.Clone(r.edges.Needs[i])
	for len(stack) > 0 {
		j := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if up[j] {
			continue
		}
		up[j] = true
		stack = append(stack, r.edges.Needs[j]...)
	}
	return up
}
