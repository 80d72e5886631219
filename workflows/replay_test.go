package workflows

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	gatenode "github.com/retrain-ml/retrain/activities/gate"
	"github.com/retrain-ml/retrain/nodetype"
	"github.com/retrain-ml/retrain/runs"
)

// recordedHistories are the histories the replay tests check: those of
// integration/replay_test.go (testdata/*.json, refreshed from this tree)
// and those recorded by earlier releases' workers, one folder per commit
// (testdata/releases/REV/, written by integration/upgrade_test.go and
// never refreshed: they stand for runs still in flight when a worker of
// this tree replaces that release's; docs/upgrades.md).
func recordedHistories(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	released, err := filepath.Glob(filepath.Join("testdata", "releases", "*", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 || len(released) == 0 {
		t.Fatalf("recorded histories: %d in testdata, %d in testdata/releases; want both", len(files), len(released))
	}
	return append(files, released...)
}

// replayer knows the workflows a run's history can hold: Pipeline and
// ForeachChunk, and the gate's child workflow. Each may be replaced, to
// replay against a changed version.
func replayer(pipeline, gate any) worker.WorkflowReplayer {
	r := worker.NewWorkflowReplayer()
	if pipeline == nil {
		pipeline = Pipeline
	}
	r.RegisterWorkflowWithOptions(pipeline, workflow.RegisterOptions{Name: runs.PipelineWorkflow})
	r.RegisterWorkflowWithOptions(ForeachChunk, workflow.RegisterOptions{Name: ForeachChunkWorkflow})
	if gate == nil {
		gate = gatenode.Gate
	}
	r.RegisterWorkflowWithOptions(gate, workflow.RegisterOptions{Name: gatenode.GateWorkflow})
	return r
}

func loadHistory(t *testing.T, path string) *historypb.History {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return h
}

// replay replays h under its own workflow id, as a worker would: under
// the replayer's default id, the ids of the child workflows a run starts
// (RUN/NODE) would change and their commands not match.
func replay(r worker.WorkflowReplayer, h *historypb.History) error {
	return replayWith(r, h, nil)
}

// replayQuietly replays h where failing is the expected outcome: the SDK's
// error log of the mismatch would only be noise.
func replayQuietly(r worker.WorkflowReplayer, h *historypb.History) error {
	return replayWith(r, h, sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
}

func replayWith(r worker.WorkflowReplayer, h *historypb.History, logger sdklog.Logger) error {
	a := h.Events[0].GetWorkflowExecutionStartedEventAttributes()
	return r.ReplayWorkflowHistoryWithOptions(logger, h, worker.ReplayWorkflowHistoryOptions{
		OriginalExecution: workflow.Execution{ID: a.GetWorkflowId(), RunID: a.GetOriginalExecutionRunId()},
	})
}

func workflowType(h *historypb.History) string {
	if len(h.Events) == 0 {
		return ""
	}
	return h.Events[0].GetWorkflowExecutionStartedEventAttributes().GetWorkflowType().GetName()
}

// TestReplayRecordedHistories replays histories recorded from real runs
// against the current workflow code, so a change that would break running
// pipelines, including runs a previous release started, fails here,
// offline.
func TestReplayRecordedHistories(t *testing.T) {
	releases := map[string]int{}
	for _, f := range recordedHistories(t) {
		name := strings.TrimPrefix(filepath.ToSlash(f), "testdata/")
		if rel, ok := strings.CutPrefix(name, "releases/"); ok {
			releases[strings.Split(rel, "/")[0]]++
		}
		t.Run(name, func(t *testing.T) {
			if err := replay(replayer(nil, nil), loadHistory(t, f)); err != nil {
				t.Fatal(err)
			}
		})
	}
	// Each release folder holds every scenario its build could run.
	for rel, n := range releases {
		for _, scenario := range []string{"upgrade-plain", "upgrade-compensation", "upgrade-gate", "upgrade-gate.gate"} {
			if _, err := os.Stat(filepath.Join("testdata", "releases", rel, scenario+".json")); err != nil {
				t.Errorf("release %s (%d histories) has no %s history: %v", rel, n, scenario, err)
			}
		}
	}
}

// The changes below are the kind docs/upgrades.md says needs a patch: one
// more command (a timer) at the start of the workflow. Unpatched, a
// recorded run no longer replays; behind workflow.GetVersion it does,
// while new runs take the new branch.
const examplePatch = "replay-test-example"

func unpatchedPipeline(ctx workflow.Context, in runs.PipelineInput) (*runs.Result, error) {
	if err := workflow.Sleep(ctx, time.Second); err != nil {
		return nil, err
	}
	return Pipeline(ctx, in)
}

func patchedPipeline(ctx workflow.Context, in runs.PipelineInput) (*runs.Result, error) {
	if workflow.GetVersion(ctx, examplePatch, workflow.DefaultVersion, 1) >= 1 {
		if err := workflow.Sleep(ctx, time.Second); err != nil {
			return nil, err
		}
	}
	return Pipeline(ctx, in)
}

func unpatchedGate(ctx workflow.Context, in nodetype.Input) (nodetype.Result, error) {
	if err := workflow.Sleep(ctx, time.Second); err != nil {
		return nodetype.Result{}, err
	}
	return gatenode.Gate(ctx, in)
}

func patchedGate(ctx workflow.Context, in nodetype.Input) (nodetype.Result, error) {
	if workflow.GetVersion(ctx, examplePatch, workflow.DefaultVersion, 1) >= 1 {
		if err := workflow.Sleep(ctx, time.Second); err != nil {
			return nodetype.Result{}, err
		}
	}
	return gatenode.Gate(ctx, in)
}

// TestReplayCatchesUnpatchedChange: the replay test is a guard that bites.
// Every recorded history fails against a workflow whose command sequence
// changed without a patch, and replays against the same change behind
// workflow.GetVersion.
func TestReplayCatchesUnpatchedChange(t *testing.T) {
	var pipelines, gates int
	for _, f := range recordedHistories(t) {
		hist := loadHistory(t, f)
		var unpatched, patched worker.WorkflowReplayer
		switch workflowType(hist) {
		case runs.PipelineWorkflow:
			pipelines++
			unpatched, patched = replayer(unpatchedPipeline, nil), replayer(patchedPipeline, nil)
		case gatenode.GateWorkflow:
			gates++
			unpatched, patched = replayer(nil, unpatchedGate), replayer(nil, patchedGate)
		default:
			continue // a foreach chunk: unchanged here
		}
		t.Run(filepath.ToSlash(f), func(t *testing.T) {
			err := replayQuietly(unpatched, hist)
			// TMPRL1100 marks the SDK's nondeterminism errors.
			if err == nil || !strings.Contains(err.Error(), "TMPRL1100") {
				t.Fatalf("unpatched change replayed with error %v, want a nondeterminism error", err)
			}
			if err := replay(patched, hist); err != nil {
				t.Fatalf("the change behind GetVersion: %v", err)
			}
		})
	}
	if pipelines == 0 || gates == 0 {
		t.Fatalf("checked %d Pipeline and %d Gate histories, want some of each", pipelines, gates)
	}
}
