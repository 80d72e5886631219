package runs

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Reuse is what a rerun (PipelineInput.Reuse) knows of the run it reruns.
// A starter sends Run and From; the workflow fills the rest from the
// earlier run itself (LoadReuseActivity) and decides from it, against the plan it resolves itself,
// which nodes it takes over: a node that succeeded in Run, is not
// downstream of a From node, whose definition (type, `with`, `when`, the
// values of the params they read) is the same in both plans, whose effect
// no on_failure node undid, whose upstream nodes are all taken over too,
// and whose outputs still point at something that exists
// (VerifyReuseActivity). The rest runs.
type Reuse struct {
	Run string `json:"run"` // the earlier run's id
	// From are the nodes to run again with everything downstream of them;
	// empty: run again what did not succeed (failed, cancelled, skipped).
	From []string `json:"from,omitempty"`
	// Plan is the earlier run's plan (a dags.Plan as its PlanQuery
	// answers), to compare node definitions with. This and the fields
	// below are LoadReuseActivity's; what a starter sends is ignored.
	Plan json.RawMessage `json:"plan,omitempty"`
	// Nodes are the earlier run's nodes as its result lists them (a
	// foreach node's instances left out), succeeded ones with outputs.
	Nodes []NodeState `json:"nodes,omitempty"`
	// Compensations are the earlier run's on_failure nodes that
	// succeeded: the nodes they compensate had their effect undone.
	Compensations []NodeState `json:"compensations,omitempty"`
}

// Names of the activity a rerun checks the outputs it would reuse with.
const (
	// VerifyReuseActivity checks that what succeeded nodes' outputs point
	// to still exists (ReuseCheck in, ReuseVerdict out), by each node
	// type's own check (nodetype.Type.Verify). A rerun calls it before it
	// reuses a node; a result cache can call it before serving a hit.
	VerifyReuseActivity = "VerifyReusedOutputs"
	// LoadReuseActivity reads the run a rerun reruns (LoadReuse): a run
	// id in, a Reuse out.
	LoadReuseActivity = "LoadRerunSource"
)

// ReuseCheck is one node whose outputs a run would reuse.
type ReuseCheck struct {
	Node    string         `json:"node"`
	Type    string         `json:"type"`
	With    map[string]any `json:"with,omitempty"` // the node's resolved `with`, secrets left as references
	Outputs map[string]any `json:"outputs,omitempty"`
}

// ReuseVerdict maps each checked node whose outputs cannot be reused to
// why ("snapshot 42 of ml.training is gone"); a node it does not name
// may be reused.
type ReuseVerdict struct {
	Gone map[string]string `json:"gone,omitempty"`
}

// ReusedNodes returns the nodes of res taken over from an earlier run,
// in plan order, and that run; "" and nil when res reused nothing.
func ReusedNodes(res *Result) (run string, nodes []string) {
	for _, n := range res.Nodes {
		if n.ReusedFrom != "" {
			nodes = append(nodes, n.ID)
			run = n.ReusedFrom
		}
	}
	if res.ReusedFrom != "" {
		run = res.ReusedFrom
	}
	return run, nodes
}

// ReusedLine is the line the CLI and the report print about a rerun:
// "reused from run R: nodes a, b, c", or "rerun of run R: reused no
// node"; "" for a run that is not a rerun.
func ReusedLine(res *Result) string {
	run, nodes := ReusedNodes(res)
	switch {
	case run == "":
		return ""
	case len(nodes) == 0:
		return fmt.Sprintf("rerun of run %s: reused no node", run)
	}
	return fmt.Sprintf("reused from run %s: nodes %s", run, strings.Join(nodes, ", "))
}
