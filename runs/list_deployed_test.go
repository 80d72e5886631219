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
	} {
		if got := Deployed(&c.res); got != c.want {
			t.Errorf("Deployed = %q, want %q", got, c.want)
		}
	}
}
