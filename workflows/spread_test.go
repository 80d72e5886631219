package workflows

import (
	"testing"

	"github.com/retrain-ml/retrain/dags"
)

func TestSpreadTarget(t *testing.T) {
	node := dags.PlanNode{Hosts: &dags.Hosts{Field: "hosts", Workflow: "TrainGang"}}
	for _, tt := range []struct {
		with map[string]any
		want bool
	}{
		{map[string]any{"hosts": 2.0}, true},
		{map[string]any{"hosts": int64(3)}, true},
		{map[string]any{"hosts": 1.0}, false},
		{map[string]any{"hosts": "2"}, false}, // not converted: the activity's decoding refuses it
		{map[string]any{}, false},
	} {
		target, ok := spreadTarget(node, tt.with)
		if ok != tt.want || (ok && target != "TrainGang") {
			t.Errorf("with %v: %q, %v; want spread %v", tt.with, target, ok, tt.want)
		}
	}
	if _, ok := spreadTarget(dags.PlanNode{}, map[string]any{"hosts": 4.0}); ok {
		t.Error("a type without Hosts spread over hosts")
	}
}
