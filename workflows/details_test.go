package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/nodetype"
	"github.com/retrain-ml/retrain/runs"
)

// metadataQuery is the SDK's built-in query the Web UI reads current
// details with.
const metadataQuery = "__temporal_workflow_metadata"

func TestRenderDetailsList(t *testing.T) {
	start := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	end := start.Add(1500 * time.Millisecond)
	res := &runs.Result{
		ID: "hello-1", Pipeline: "hello", Status: runs.StatusRunning,
		Nodes: []runs.NodeState{
			{ID: "greet", Type: "command", Status: runs.NodeSucceeded, Attempts: 2, StartedAt: &start, EndedAt: &end,
				Outputs: map[string]any{"stdout": "hi | *there*\n" + strings.Repeat("x", 100), "exit_code": 0, "stderr": ""}},
			{ID: "count", Type: "command", Status: runs.NodeRunning, ScheduledAt: &start},
			{ID: "broken", Type: "command", Status: runs.NodeFailed, Attempts: 3, Error: "exit status 1"},
			{ID: "later", Type: "noop", Status: runs.NodeSkipped, Reason: `when "false" is false`},
		},
	}
	got := renderDetails(res, "http://127.0.0.1:8234/runs/{run}")
	for _, want := range []string{
		"**hello** running: 3 of 4 nodes done",
		"Report: [http://127.0.0.1:8234/runs/hello-1](http://127.0.0.1:8234/runs/hello-1)",
		// Sorted keys, markdown escaped, long values cut.
		"- **greet** · command · succeeded · 2 attempts · 1.5s: exit\\_code=0, stdout=hi \\| \\*there\\* " + strings.Repeat("x", 26) + "…\n",
		"- **count** · command · running · since 10:00:00Z (progress: Pending Activities)\n",
		"- **broken** · command · failed · 3 attempts: exit status 1\n",
		`- **later** · noop · skipped: when "false" is false` + "\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("details lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "more nodes") {
		t.Errorf("four nodes reported as cut:\n%s", got)
	}
	if again := renderDetails(res, "http://127.0.0.1:8234/runs/{run}"); again != got {
		t.Error("rendering the same state twice differs: map order leaked into the details")
	}

	noURL := renderDetails(res, "")
	if !strings.Contains(noURL, "Report: `retrain report hello-1`") {
		t.Errorf("without a report URL the details do not name the command:\n%s", noURL)
	}
}

func TestRenderDetailsCapsRowsRunningFirst(t *testing.T) {
	res := &runs.Result{ID: "big", Pipeline: "big", Status: runs.StatusRunning}
	for i := range 1000 {
		st := runs.NodeSucceeded
		switch {
		case i >= 900:
			st = runs.NodePending
		case i == 700 || i == 800:
			st = runs.NodeRunning
		case i == 750:
			st = runs.NodeFailed
		}
		res.Nodes = append(res.Nodes, runs.NodeState{ID: fmt.Sprintf("n%04d", i), Type: "noop", Status: st})
	}
	got := renderDetails(res, "")
	rows := strings.Count(got, "· noop ·")
	if rows != maxDetailRows {
		t.Errorf("%d rows, want %d", rows, maxDetailRows)
	}
	for _, want := range []string{"**n0700**", "**n0750**", "**n0800**", "**n0000**", "**n0046**"} {
		if !strings.Contains(got, want) {
			t.Errorf("details lack row %s", want)
		}
	}
	if strings.Contains(got, "**n0047**") {
		t.Error("row n0047 shown: running and failed nodes did not come first")
	}
	// Hidden: 897 succeeded less the 47 shown, and the 100 pending.
	if want := "950 more nodes not shown: 850 succeeded, 100 pending"; !strings.Contains(got, want) {
		t.Errorf("details lack %q:\n%s", want, got[len(got)-200:])
	}
	if i, j := strings.Index(got, "**n0046**"), strings.Index(got, "**n0700**"); i > j {
		t.Error("rows are not in plan order")
	}
}

func TestReportURLEscapesRunID(t *testing.T) {
	if got := ReportURL("http://h:1/runs/{run}", "a/b c"); got != "http://h:1/runs/a%2Fb%20c" {
		t.Errorf("ReportURL = %s", got)
	}
}

// TestPipelineCurrentDetails checks what the Web UI's metadata query gets
// from a finished run: the node table and the report link the resolver
// passed on from the worker's config.
func TestPipelineCurrentDetails(t *testing.T) {
	h := newHarness(t)
	env := h.NewTestWorkflowEnvironment()
	reg, _ := dags.NewRegistry(stepType)
	Register(env)
	resolver := &Resolver{AllowInlineSpecs: true, Registry: reg, ReportURL: "http://reports.test/runs/{run}"}
	env.RegisterActivityWithOptions(resolver.Resolve, activity.RegisterOptions{Name: runs.ResolveActivity})
	env.RegisterActivityWithOptions(nodetype.Activity(h.step), activity.RegisterOptions{Name: "step"})
	spec, _ := json.Marshal("name: shown\nnodes:\n  - {id: greet, type: step, with: {msg: hi}}\n  - {id: count, type: step, needs: [greet], with: {n: 3}}\n")
	env.ExecuteWorkflow(runs.PipelineWorkflow, runs.PipelineInput{Spec: spec})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	v, err := env.QueryWorkflow(metadataQuery)
	if err != nil {
		t.Fatal(err)
	}
	var md sdkpb.WorkflowMetadata
	if err := v.Get(&md); err != nil {
		t.Fatal(err)
	}
	got := md.GetCurrentDetails()
	for _, want := range []string{
		"**shown** succeeded: 2 of 2 nodes done",
		"(http://reports.test/runs/default-test-workflow-id)",
		"- **greet** · step · succeeded · ", ": msg=hi\n",
		"- **count** · step · succeeded · ", ": n=3\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("current details lack %q:\n%s", want, got)
		}
	}
}

// TestPipelineInvalidSpecKeepsItsType checks a spec that fails validation
// fails the run as InvalidPipeline, not PipelineFailed, with the runs.Result in
// its details, named after the spec's pipeline and labelled with it.
func TestPipelineInvalidSpecKeepsItsType(t *testing.T) {
	h := newHarness(t)
	env := h.NewTestWorkflowEnvironment()
	reg, _ := dags.NewRegistry(stepType)
	Register(env)
	env.RegisterActivityWithOptions((&Resolver{AllowInlineSpecs: true, Registry: reg, SearchAttributes: true}).Resolve,
		activity.RegisterOptions{Name: runs.ResolveActivity})
	var labelled []string
	env.OnUpsertTypedSearchAttributes(temporal.NewSearchAttributes(runs.PipelineKey.ValueSet("cyclic"))).Run(func(mock.Arguments) {
		labelled = append(labelled, "cyclic")
	}).Return(nil).Once()
	spec, _ := json.Marshal("name: cyclic\nnodes:\n  - {id: a, type: step, needs: [b]}\n  - {id: b, type: step, needs: [a]}\n")
	env.ExecuteWorkflow(runs.PipelineWorkflow, runs.PipelineInput{Spec: spec, SpecFile: "cyclic.yaml"})
	err := env.GetWorkflowError()
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != errtype.InvalidPipeline {
		t.Fatalf("error %v, want type %s", err, errtype.InvalidPipeline)
	}
	if !strings.HasPrefix(appErr.Message(), "pipeline cyclic is invalid: ") || !strings.Contains(appErr.Message(), "-> a") {
		t.Errorf("message %q does not name the pipeline and the cycle", appErr.Message())
	}
	res := mustFail(t, err)
	if res.Pipeline != "cyclic" || !strings.Contains(res.Error, "cycle") || len(res.Nodes) != 0 {
		t.Errorf("result = %+v", res)
	}
	if len(labelled) != 1 {
		t.Errorf("search attribute upserts %v, want RetrainPipeline=cyclic once", labelled)
	}
	env.AssertExpectations(t)
}

// TestPipelineUnparsableSpecNamesItsFile: no name to be had, the message
// names the file instead of printing an empty pipeline name.
func TestPipelineUnparsableSpecNamesItsFile(t *testing.T) {
	h := newHarness(t)
	_, err := h.run("nodes: [", nil, nil)
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != errtype.InvalidPipeline {
		t.Fatalf("error %v, want type %s", err, errtype.InvalidPipeline)
	}
	if !strings.HasPrefix(appErr.Message(), "spec test.yaml is invalid: ") {
		t.Errorf("message %q", appErr.Message())
	}
}

// BenchmarkRenderDetails measures one rebuild of the current details of
// an 8,000-node run (about the most a run's history holds): the loop pays
// this once per workflow task in which a node changed state.
//
//	go test ./workflows -run '^$' -bench RenderDetails
func BenchmarkRenderDetails(b *testing.B) {
	res := &runs.Result{ID: "big", Pipeline: "big", Status: runs.StatusRunning}
	start := time.Now()
	end := start.Add(time.Second)
	for i := range 8000 {
		n := runs.NodeState{ID: fmt.Sprintf("n%05d", i), Type: "command", Status: runs.NodePending}
		if i < 4000 {
			n.Status, n.Attempts, n.StartedAt, n.EndedAt = runs.NodeSucceeded, 1, &start, &end
			n.Outputs = map[string]any{"exit_code": 0, "stdout": "some output", "stderr": ""}
		} else if i < 4016 {
			n.Status, n.ScheduledAt = runs.NodeRunning, &start
		}
		res.Nodes = append(res.Nodes, n)
	}
	b.ReportAllocs()
	for b.Loop() {
		renderDetails(res, "http://127.0.0.1:8234/runs/{run}")
	}
}

// TestRenderDetailsCache: the Web UI's node list says how the cache
// served a node, "ago" as of the node's start.
func TestRenderDetailsCache(t *testing.T) {
	start := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	made := start.Add(-3 * 24 * time.Hour)
	res := &runs.Result{ID: "r2", Pipeline: "p", Status: runs.StatusRunning, Nodes: []runs.NodeState{
		{ID: "split", Type: "split", Status: runs.NodeSucceeded, ScheduledAt: &start, Cache: &runs.NodeCache{Hit: true, Run: "r1", Time: &made}},
		{ID: "train", Type: "train", Status: runs.NodeRunning, ScheduledAt: &start, Cache: &runs.NodeCache{Reason: "param seed 1 -> 2"}},
	}}
	out := renderDetails(res, "")
	for _, want := range []string{"cached (run r1, 3 days ago)", "cache miss: param seed 1 -&gt; 2"} { // markdown-escaped, as the UI shows it
		if !strings.Contains(out, want) {
			t.Errorf("details lack %q:\n%s", want, out)
		}
	}
}

func TestRenderDetailsWaiting(t *testing.T) {
	deadline := time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)
	res := &runs.Result{ID: "r", Pipeline: "p", Status: runs.StatusWaiting,
		Nodes:   []runs.NodeState{{ID: "a", Status: runs.NodeSucceeded}, {ID: "b", Status: runs.NodeWaiting}},
		Waiting: []runs.Waiting{{Node: "b", Condition: "files /d/*.csv", Saw: "no files match /d/*.csv", Checks: 2, Deadline: deadline}}}
	got := renderDetails(res, "")
	if !strings.Contains(got, "**p** waiting: 1 of 2 nodes done") ||
		!strings.Contains(got, "Waiting for data (node b): no files match /d/\\*.csv [files /d/\\*.csv, 2 checks, deadline 2026-11-28T08:00:00Z]") {
		t.Errorf("details:\n%s", got)
	}
}
