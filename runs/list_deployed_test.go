package runs

import "testing"

// TestDeployed: what a run's deploy nodes moved, a rollback_model
// compensation marked, a deploy that moved nothing left out.
func TestDeployed(t *testing.T) {
	deploy := func(id, ref string, moved bool) NodeState {
		return NodeState{ID: id, Type: "deploy", Status: NodeSucceeded, Outputs: map[string]any{"ref": ref, "moved": moved}}
	}
	for _, c := range []struct {
		res  Result
		want string
	}{
		{Result{Nodes: []NodeState{{ID: "gate", Type: "gate", Status: NodeSucceeded}, deploy("deploy", "ctr@v2", true)}}, "ctr@v2"},
		{Result{Nodes: []NodeState{deploy("deploy", "ctr@v2", false)}}, ""},
		{Result{Nodes: []NodeState{{ID: "deploy", Type: "deploy", Status: NodeCancelled}}}, ""},
		{Result{Nodes: []NodeState{{ID: "deploy", Type: "deploy", Status: NodeSucceeded,
			Outputs: map[string]any{"ref": "ctr@v4", "moved": false, "superseded_by": "v3"}}}}, "ctr@v4 (superseded by v3)"},
		{Result{Nodes: []NodeState{deploy("a", "ctr@v4", true), deploy("b", "rank@v9", true)},
			Compensations: []NodeState{{ID: "undo", Type: "rollback_model", Status: NodeSucceeded, Compensates: "b"}}}, "ctr@v4, rank@v9 (rolled back)"},
		// A canary that promoted is named as a deploy is; one that rolled
		// back (failed) or was superseded is not, or is said so.
		{Result{Nodes: []NodeState{{ID: "canary", Type: "canary", Status: NodeSucceeded,
			Outputs: map[string]any{"ref": "ctr@v5", "moved": true, "decision": "promoted"}}}}, "ctr@v5"},
		{Result{Nodes: []NodeState{{ID: "canary", Type: "canary", Status: NodeFailed,
			Outputs: map[string]any{"ref": "ctr@v5", "moved": false, "decision": "rolled_back"}}}}, ""},
		{Result{Nodes: []NodeState{{ID: "canary", Type: "canary", Status: NodeSucceeded,
			Outputs: map[string]any{"ref": "ctr@v3", "moved": false, "superseded_by": "v5"}}}}, "ctr@v3 (superseded by v5)"},
		{Result{Nodes: []NodeState{{ID: "canary", Type: "canary", Status: NodeSucceeded,
			Outputs: map[string]any{"ref": "ctr@v3", "moved": true, "forced": true}}}}, "ctr@v3 (forced)"},
	} {
		if got := Deployed(&c.res); got != c.want {
			t.Errorf("Deployed = %q, want %q", got, c.want)
		}
	}
}
