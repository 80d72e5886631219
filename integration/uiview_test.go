package integration

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/worker"
	"github.com/retrain-ml/retrain/workflows"
)

// metadataQuery is the SDK's built-in query the Web UI reads a run's
// current details with.
const metadataQuery = "__temporal_workflow_metadata"

// TestTimelineNamesNodes checks what the Web UI's timeline is drawn from:
// every activity the hello run scheduled carries its node id as summary,
// while its activity type stays the node type's (replay depends on it).
func TestTimelineNamesNodes(t *testing.T) {
	queue := newQueue(t)
	startWorker(t, queue)
	res := runNamed(t, queue, "hello")
	wantStatus(t, res, runs.StatusSucceeded)

	var summaries []string
	for _, ev := range history(t, tclient, res.ID).GetEvents() {
		attrs := ev.GetActivityTaskScheduledEventAttributes()
		if attrs == nil {
			continue
		}
		var summary string
		if err := converter.GetDefaultDataConverter().FromPayload(ev.GetUserMetadata().GetSummary(), &summary); err != nil {
			t.Fatalf("activity %s: summary: %v", attrs.GetActivityId(), err)
		}
		n := node(t, res, summary)
		if attrs.GetActivityType().GetName() != n.Type || attrs.GetActivityId() != n.ID {
			t.Errorf("summary %s on activity %s of type %s, want node %s of type %s",
				summary, attrs.GetActivityId(), attrs.GetActivityType().GetName(), n.ID, n.Type)
		}
		summaries = append(summaries, summary)
	}
	var ids []string
	for _, n := range res.Nodes {
		ids = append(ids, n.ID)
	}
	slices.Sort(summaries)
	slices.Sort(ids)
	if !slices.Equal(summaries, ids) {
		t.Errorf("activity summaries %v, want the node ids %v", summaries, ids)
	}

	desc, err := tclient.DescribeWorkflowExecution(context.Background(), res.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	var summary string
	if err := converter.GetDefaultDataConverter().FromPayload(desc.GetExecutionConfig().GetUserMetadata().GetSummary(), &summary); err != nil || summary != "pipeline hello" {
		t.Errorf("run summary %q (%v), want %q", summary, err, "pipeline hello")
	}
}

// TestCurrentDetailsLiveTable reads a run's current details the way the Web
// UI does, while a node runs and after the run: the node table follows the
// run, and the report link comes from the worker's --report-url.
func TestCurrentDetailsLiveTable(t *testing.T) {
	parallel(t)
	queue := newQueue(t)
	startWorkerWith(t, worker.Config{TaskQueue: queue, ReportURL: "http://reports.example:8234/runs/{run}"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run, err := runs.Start(ctx, tclient, runs.Request{TaskQueue: queue, Spec: []byte(`
name: live-table
nodes:
  - {id: quick, type: command, with: {argv: [echo, "a|b"]}}
  - {id: slow, type: command, needs: [quick], with: {argv: [sh, -c, "sleep 3"]}}
`)})
	if err != nil {
		t.Fatal(err)
	}
	details := func() string {
		t.Helper()
		v, err := tclient.QueryWorkflow(ctx, run.ID, "", metadataQuery)
		if err != nil {
			t.Fatal(err)
		}
		var md sdkpb.WorkflowMetadata
		if err := v.Get(&md); err != nil {
			t.Fatal(err)
		}
		return md.GetCurrentDetails()
	}

	var live string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		live = details()
		if strings.Contains(live, "- **slow** · command · running") || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range []string{
		"**live-table** running: 1 of 2 nodes done",
		"Report: [http://reports.example:8234/runs/" + run.ID + "](http://reports.example:8234/runs/" + run.ID + ")",
		"- **quick** · command · succeeded · ", `stdout=a\|b`,
		"- **slow** · command · running · since ",
	} {
		if !strings.Contains(live, want) {
			t.Errorf("details while slow runs lack %q:\n%s", want, live)
		}
	}

	res, err := runs.Wait(ctx, tclient, run.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, runs.StatusSucceeded)
	final := details() // a closed run: the worker replays it to answer
	if !strings.Contains(final, "**live-table** succeeded: 2 of 2 nodes done") || !strings.Contains(final, "- **slow** · command · succeeded · ") {
		t.Errorf("details of the finished run:\n%s", final)
	}
}

// TestCurrentDetailsWithoutReportURL: a worker that knows no report server
// tells the reader which command writes the report.
func TestCurrentDetailsWithoutReportURL(t *testing.T) {
	queue := newQueue(t)
	startWorker(t, queue)
	res := runNamed(t, queue, "hello")
	v, err := tclient.QueryWorkflow(context.Background(), res.ID, "", metadataQuery)
	if err != nil {
		t.Fatal(err)
	}
	var md sdkpb.WorkflowMetadata
	if err := v.Get(&md); err != nil {
		t.Fatal(err)
	}
	if want := "Report: `retrain report " + res.ID + "`"; !strings.Contains(md.GetCurrentDetails(), want) {
		t.Errorf("details lack %q:\n%s", want, md.GetCurrentDetails())
	}
}

// TestInvalidRunsKeepTypeAndLabel starts runs that fail validation, a
// named pipeline with a wrong param and an inline spec with a cycle: both
// fail with error type InvalidPipeline, carry their pipeline's name in the
// result, the message and the RetrainPipeline search attribute, and their
// histories replay.
func TestInvalidRunsKeepTypeAndLabel(t *testing.T) {
	queue := newQueue(t)
	startWorker(t, queue)
	replayer := sdkworker.NewWorkflowReplayer()
	workflows.Register(replayer)
	cases := []struct {
		name, want, inMessage string
		req                   runs.Request
	}{
		{"named", "hello", "nope", runs.Request{Pipeline: "hello", Params: map[string]any{"nope": 1}}},
		{"inline", "cyclic-ui", "->", runs.Request{SpecFile: "cyclic.yaml", Spec: []byte(
			"name: cyclic-ui\nnodes:\n  - {id: a, type: noop, needs: [b]}\n  - {id: b, type: noop, needs: [a]}\n")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			tc.req.TaskQueue = queue
			run, err := runs.Start(ctx, tclient, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			err = tclient.GetWorkflow(ctx, run.ID, "").Get(ctx, nil)
			var appErr *temporal.ApplicationError
			if !errors.As(err, &appErr) || appErr.Type() != errtype.InvalidPipeline {
				t.Fatalf("run error %v, want type %s", err, errtype.InvalidPipeline)
			}
			if msg := appErr.Message(); !strings.HasPrefix(msg, "pipeline "+tc.want+" is invalid: ") || !strings.Contains(msg, tc.inMessage) {
				t.Errorf("message %q", msg)
			}
			res, err := runs.Wait(ctx, tclient, run.ID, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != runs.StatusFailed || res.Pipeline != tc.want || !strings.Contains(res.Error, tc.inMessage) {
				t.Errorf("result %+v", res)
			}
			desc, err := tclient.DescribeWorkflowExecution(ctx, run.ID, "")
			if err != nil {
				t.Fatal(err)
			}
			var label string
			sa := desc.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()[runs.PipelineKey.GetName()]
			if err := converter.GetDefaultDataConverter().FromPayload(sa, &label); err != nil || label != tc.want {
				t.Errorf("RetrainPipeline = %q (%v), want %q", label, err, tc.want)
			}
			if err := replayer.ReplayWorkflowHistory(nil, history(t, tclient, run.ID)); err != nil {
				t.Errorf("replay: %v", err)
			}
		})
	}
}

// TestReportServer renders a finished run's report over HTTP the way
// `retrain dev` serves it, and answers 404 for a run that does not exist.
func TestReportServer(t *testing.T) {
	queue := newQueue(t)
	startWorker(t, queue)
	res := runNamed(t, queue, "hello")
	srv := httptest.NewServer(cli.ReportHandler(tclient, nil, cli.ReportLinks{UIAddress: "http://ui.test:8233", Namespace: "default"}, quiet))
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/runs/" + res.ID)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET report: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	for _, n := range res.Nodes {
		if !bytes.Contains(page, []byte(n.ID)) {
			t.Errorf("report page does not mention node %s", n.ID)
		}
	}
	if !bytes.Contains(page, []byte(res.ID)) {
		t.Error("report page does not name the run")
	}
	if !bytes.Contains(page, []byte("http://ui.test:8233/namespaces/default/workflows/"+res.ID)) {
		t.Error("report page does not link to the run in the Web UI")
	}
	// hello has no feature_stats node, so no stats page to serve.
	resp, err = http.Get(srv.URL + "/stats/greet/" + res.ID)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET stats page of a command node: %s, want 404", resp.Status)
	}

	resp, err = http.Get(srv.URL + "/runs/no-such-run")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET report of a missing run: %s, want 404", resp.Status)
	}
}

// TestRunLinksToPublishedUI runs `retrain run` against a namespace that
// publishes its Web UI on another port than the default: the printed link
// uses the published address, and an explicit --ui-address still wins.
func TestRunLinksToPublishedUI(t *testing.T) {
	ctx := context.Background()
	queue := newQueue(t)
	startWorker(t, queue)
	const published = "http://127.0.0.1:18233"
	if err := runs.PublishUIAddress(ctx, tclient, server.Namespace(), published); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = runs.PublishUIAddress(ctx, tclient, server.Namespace(), server.UIAddress()) })
	t.Setenv("RETRAIN_UI_ADDRESS", "")

	retrain := func(extra ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		app := &cli.App{Out: &stdout, Err: &stderr}
		root := cli.NewRoot(app, "retrain")
		root.SetArgs(append([]string{"run", "hello", "--wait", "--task-queue", queue,
			"--address", server.FrontendAddress(), "--namespace", server.Namespace()}, extra...))
		if err := root.ExecuteContext(ctx); err != nil {
			t.Fatalf("retrain run: %v\n%s", err, stderr.String())
		}
		return stderr.String()
	}
	if out := retrain(); !strings.Contains(out, "\n  "+published+"/namespaces/"+server.Namespace()+"/workflows/hello-") {
		t.Errorf("retrain run printed no link on the published UI %s:\n%s", published, out)
	}
	if out := retrain("--ui-address", "http://ui.example:9000"); !strings.Contains(out, "\n  http://ui.example:9000/namespaces/") {
		t.Errorf("--ui-address did not win:\n%s", out)
	}

	// A stack without a UI publishes "": no link at all.
	if err := runs.PublishUIAddress(ctx, tclient, server.Namespace(), ""); err != nil {
		t.Fatal(err)
	}
	if out := retrain(); strings.Contains(out, "/namespaces/") {
		t.Errorf("link printed for a namespace without a UI:\n%s", out)
	}
}
