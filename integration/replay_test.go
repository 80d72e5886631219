package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/workflows"
)

// historyOutEnv names a folder to write the histories this test records;
// `RETRAIN_WRITE_HISTORIES=$PWD/workflows/testdata go test ./integration -run Replay`
// refreshes the ones workflows' replay test checks on every build.
const historyOutEnv = "RETRAIN_WRITE_HISTORIES"

// TestReplayRealHistories runs pipelines covering every interpreter path on
// the real server and replays their histories against the current code: a
// non-deterministic change to the workflow fails here.
func TestReplayRealHistories(t *testing.T) {
	parallel(t)
	queue := newQueue(t)
	startWorker(t, queue)
	cases := map[string]string{
		"hello": "",
		"failure-compensation": `
name: failure-compensation
defaults: {retry: {max_attempts: 2, initial_interval: 100ms}}
nodes:
  - {id: stage, type: noop, with: {snapshot: 7}}
  - {id: flaky, type: command, needs: [stage], with: {argv: ["sh", "-c", "exit 1"]}}
  - {id: never, type: noop, needs: [flaky]}
  - {id: skipped, type: noop, needs: [stage], when: "${nodes.stage.outputs.snapshot} > 100"}
on_failure:
  - {id: undo_stage, type: noop, compensates: stage, with: {to: "${nodes.stage.outputs.snapshot}"}}
`,
	}
	replayer := sdkworker.NewWorkflowReplayer()
	workflows.Register(replayer)
	for name, spec := range cases {
		t.Run(name, func(t *testing.T) {
			var res *runs.Result
			if spec == "" {
				res = runNamed(t, queue, name)
			} else {
				res = runSpec(t, queue, spec, nil)
			}
			hist := history(t, tclient, res.ID)
			if err := replayer.ReplayWorkflowHistory(nil, hist); err != nil {
				t.Fatalf("replay of %s: %v", name, err)
			}
			if dir := os.Getenv(historyOutEnv); dir != "" {
				b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(hist)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, name+".json"), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func runNamed(t *testing.T, queue, pipeline string) *runs.Result {
	t.Helper()
	ctx := context.Background()
	run, err := runs.Start(ctx, tclient, runs.Request{Pipeline: pipeline, TaskQueue: queue})
	if err != nil {
		t.Fatal(err)
	}
	res, err := runs.Wait(ctx, tclient, run.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func history(t *testing.T, c client.Client, id string) *historypb.History {
	t.Helper()
	h := &historypb.History{}
	iter := c.GetWorkflowHistory(context.Background(), id, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			t.Fatal(err)
		}
		h.Events = append(h.Events, ev)
	}
	return h
}

// retryCauses returns why the activities of workflow id were retried: the
// last failure each retried attempt started after (Temporal records it on
// the attempt's started event), for a test to log when a node took more
// attempts than it should have.
func retryCauses(t *testing.T, id string) []string {
	t.Helper()
	var causes []string
	for _, ev := range history(t, tclient, id).Events {
		a := ev.GetActivityTaskStartedEventAttributes()
		if a == nil || a.GetLastFailure() == nil {
			continue
		}
		causes = append(causes, fmt.Sprintf("attempt %d after: %s", a.GetAttempt(), a.GetLastFailure().GetMessage()))
	}
	return causes
}
