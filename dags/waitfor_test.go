package dags

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

const waitSpec = `name: nightly
params:
  ns: {default: features}
wait_for:
  - table: ${params.ns}.user_daily
    date_column: day
    min_rows: 1000
    complete_after: 1h
    deadline: 6h
    poll: 5m
  - files: /data/logs/${run.logical_date}/*.parquet
    marker: _SUCCESS
    deadline: 2h
    on_deadline: skip
nodes:
  - id: a
    type: command
    with: {argv: [x]}
  - id: b
    type: noop
    needs: [a]
    wait_for:
      - command: [check-feed, --day, "${run.logical_date}"]
        deadline: 30s
`

func TestWaitForCompiles(t *testing.T) {
	reg := testRegistry(t)
	s, err := Load("w.yaml", []byte(waitSpec), reg)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Compile(s, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.WaitFor) != 2 {
		t.Fatalf("plan wait_for = %+v", plan.WaitFor)
	}
	tbl, files := plan.WaitFor[0], plan.WaitFor[1]
	if tbl.Kind() != "table" || tbl.Table != "${params.ns}.user_daily" || tbl.DateColumn != "day" || tbl.MinRows != 1000 ||
		tbl.CompleteAfter != time.Hour || tbl.Deadline != 6*time.Hour || tbl.Poll != 5*time.Minute || tbl.OnDeadline != WaitFail {
		t.Errorf("table condition = %+v", tbl)
	}
	if files.Kind() != "files" || files.Marker != "_SUCCESS" || files.OnDeadline != WaitSkip || files.Poll != time.Minute {
		t.Errorf("files condition = %+v (poll defaults to 1m)", files)
	}
	var b PlanNode
	for _, n := range plan.Nodes {
		if n.ID == "b" {
			b = n
		}
	}
	if len(b.WaitFor) != 1 || b.WaitFor[0].Kind() != "command" || b.WaitFor[0].Poll != 3*time.Second {
		t.Errorf("node b wait_for = %+v (poll: a tenth of a 30s deadline)", b.WaitFor)
	}
	// The plan is what the run records: the conditions survive JSON.
	again := roundTripPlan(t, plan)
	if again.WaitFor[0].Table != tbl.Table || again.WaitFor[0].CompleteAfter != time.Hour || again.Nodes[1].WaitFor == nil {
		t.Errorf("after JSON: %+v", again.WaitFor)
	}

	r, err := ResolveWait(tbl, Scope{Params: plan.Params, Run: &RunValues{LogicalDate: "2026-11-27"}})
	if err != nil || r.Table != "features.user_daily" {
		t.Errorf("ResolveWait = %+v, %v", r, err)
	}
	r, err = ResolveWait(files, Scope{Params: plan.Params, Run: &RunValues{LogicalDate: "2026-11-27"}})
	if err != nil || r.Files != "/data/logs/2026-11-27/*.parquet" {
		t.Errorf("ResolveWait = %+v, %v", r, err)
	}
	// A param that makes the table name something else fails the run at once.
	if _, err := ResolveWait(tbl, Scope{Params: map[string]any{"ns": "a b"}}); err == nil || !strings.Contains(err.Error(), "not a table name") {
		t.Errorf("bad table from a param: %v", err)
	}
}

func TestWaitForBadInput(t *testing.T) {
	head := "name: x\nparams:\n  p: {default: x}\n"
	nodes := "nodes:\n  - {id: a, type: noop}\n"
	for _, tc := range []struct{ wait, want string }{
		{"[{table: a.b}]", `missing required field "deadline"`},
		{"[{table: a.b, deadline: 1m, poll: 5m}]", "deadline 1m is shorter than poll 5m"},
		{"[{table: a.b, deadline: 0s}]", "deadline must be positive"},
		{"[{table: a.b, deadline: 1m, poll: 10ms}]", "poll must be at least 1s"},
		{"[{deadline: 1m}]", "give one of table, files or command"},
		{"[{table: a.b, files: /x, deadline: 1m}]", "not table and files"},
		{"[{table: nodots, deadline: 1m}]", `table "nodots" is not a table name`},
		{"[{files: rel/*.csv, deadline: 1m}]", "must be an absolute path or an s3:// URI"},
		{"[{files: /x/*, marker: a/b, deadline: 1m}]", "must be a plain file name"},
		{"[{files: /x/*, min_rows: 3, deadline: 1m}]", "min_rows applies to table conditions only"},
		{"[{table: a.b, marker: _SUCCESS, deadline: 1m}]", "marker applies to files conditions only"},
		{"[{table: a.b, min_rows: 0, deadline: 1m}]", "min_rows must be at least 1"},
		{"[{table: a.b, deadline: 1m, on_deadline: later}]", `on_deadline "later": use fail or skip`},
		{"[{command: [], deadline: 1m}]", "command must not be empty"},
		{"[{table: '${nodes.a.outputs.t}', deadline: 1m}]", "may use ${params.NAME} and ${run.NAME} only"},
		{"[{table: '${params.nope}.t', deadline: 1m}]", "not a declared param"},
		{"[{files: '/d/${run.logical_day}/*', deadline: 1m}]", "not a run value"},
		{"[{table: a.b, deadline: 1m, colour: red}]", "colour"},
		{"{table: a.b}", "must be a list of conditions"},
	} {
		_, err := Load("w.yaml", []byte(head+"wait_for: "+tc.wait+"\n"+nodes), testRegistry(t))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("wait_for: %s: error %v, want %q", tc.wait, err, tc.want)
		}
	}
	// The same checks apply to a node's conditions, and compensation never waits.
	_, err := Load("w.yaml", []byte("name: x\nnodes:\n  - {id: a, type: noop, wait_for: [{table: a.b, deadline: 1s, poll: 2s}]}\n"), testRegistry(t))
	if err == nil || !strings.Contains(err.Error(), `node "a" wait_for[0]: deadline 1s is shorter than poll 2s`) {
		t.Errorf("node wait_for: %v", err)
	}
	_, err = Load("w.yaml", []byte("name: x\nnodes:\n  - {id: a, type: noop}\non_failure:\n  - {id: u, type: noop, compensates: a, wait_for: [{table: a.b, deadline: 1m}]}\n"), testRegistry(t))
	if err == nil || !strings.Contains(err.Error(), "wait_for applies to nodes only") {
		t.Errorf("on_failure wait_for: %v", err)
	}
}

func TestNextPoll(t *testing.T) {
	poll := 10 * time.Second
	var got []time.Duration
	for i := range 8 {
		got = append(got, NextPoll(poll, i, time.Hour))
	}
	want := []time.Duration{10 * time.Second, 15 * time.Second, 22500 * time.Millisecond, 33750 * time.Millisecond,
		50625 * time.Millisecond, 75937500 * time.Microsecond, 80 * time.Second, 80 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("NextPoll backs off as %v, want %v", got, want)
		}
	}
	if d := NextPoll(poll, 5, 3*time.Second); d != 3*time.Second {
		t.Errorf("NextPoll past the deadline = %v, want the 3s left", d)
	}
	if d := NextPoll(poll, 0, -time.Second); d != 0 {
		t.Errorf("NextPoll after the deadline = %v", d)
	}
}

func roundTripPlan(t *testing.T, plan *Plan) *Plan {
	t.Helper()
	b, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	var out Plan
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}
