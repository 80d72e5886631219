package runs

import (
	"testing"
	"time"
)

func TestListQuery(t *testing.T) {
	q, err := ListOptions{Pipeline: "ctr's", Status: StatusFailed, Since: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), Schedule: "ctr-daily"}.Query()
	if err != nil {
		t.Fatal(err)
	}
	want := "WorkflowType = 'Pipeline' AND ExecutionStatus != 'ContinuedAsNew' AND WorkflowId NOT STARTS_WITH 'retrain-check/' AND RetrainPipeline = 'ctr''s'" +
		" AND ExecutionStatus IN ('Failed', 'Terminated', 'TimedOut') AND StartTime >= '2026-11-01T00:00:00Z'" +
		" AND (RetrainSchedule = 'ctr-daily' OR TemporalScheduledById = 'ctr-daily')"
	if q != want {
		t.Errorf("query\n%s\nwant\n%s", q, want)
	}
	if _, err := (ListOptions{Status: "done"}).Query(); err == nil {
		t.Error("unknown status accepted")
	}
}

func TestVerdict(t *testing.T) {
	gate := func(id string, st NodeStatus, passed any) NodeState {
		n := NodeState{ID: id, Type: "gate", Status: st}
		if passed != nil {
			n.Outputs = map[string]any{"passed": passed}
		}
		return n
	}
	for _, c := range []struct {
		nodes []NodeState
		want  string
	}{
		{[]NodeState{{ID: "train", Type: "train", Status: NodeSucceeded}}, ""},
		{[]NodeState{gate("gate", NodeSucceeded, true)}, "passed"},
		{[]NodeState{gate("gate", NodeSucceeded, false)}, "rejected"},
		{[]NodeState{gate("gate", NodeFailed, nil)}, "failed"},
		{[]NodeState{gate("a", NodeSucceeded, true), gate("b", NodeRunning, nil)}, "a=passed, b=running"},
	} {
		if got := Verdict(&Result{Nodes: c.nodes}); got != c.want {
			t.Errorf("Verdict(%+v) = %q, want %q", c.nodes, got, c.want)
		}
	}
}

func TestLogicalDate(t *testing.T) {
	for in, want := range map[string]string{
		"2026-11-19":                "2026-11-19",
		"2026-11-19T23:30:00-08:00": "2026-11-19", // the schedule's zone, not UTC's next day
		"":                          "",
	} {
		if got := logicalDate(in); got != want {
			t.Errorf("logicalDate(%q) = %q, want %q", in, got, want)
		}
	}
}
