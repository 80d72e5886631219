package workflows

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/runs"
)

const boundedSpec = `name: bounded
params:
  p: {type: string, default: x}
nodes:
  - id: a
    type: step
    with: {v: "${params.p}"}
`

// wantInvalid checks that a run failed as InvalidPipeline, with want in
// its message, and that no node ran.
func wantInvalid(t *testing.T, h *harness, err error, want string) {
	t.Helper()
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != errtype.InvalidPipeline || !appErr.NonRetryable() {
		t.Fatalf("error %v, want a non-retryable InvalidPipeline", err)
	}
	if !strings.Contains(appErr.Message(), want) {
		t.Fatalf("message %q, want %q", appErr.Message(), want)
	}
	mustFail(t, err)
	if len(h.order) != 0 {
		t.Errorf("nodes ran: %v", h.order)
	}
}

// The param (40 KB of date_range, which took the worker from 100
// MB to 1.3 GB and left the run retrying its workflow task forever) and
// its 845-byte cousin (whose 2.7 MB result passed the payload limit) fail
// the run at once as InvalidPipeline, in the resolve step, naming the
// param and the limit.
func TestAmplifyingParamFailsRunAtOnce(t *testing.T) {
	const one = "${date_range('2000-01-01','2027-01-01')}"
	for _, tc := range []struct {
		name, value, want string
	}{
		{"40 KB", strings.Repeat(one, (40<<10)/len(one)), `param "p": more than 32 ${...} expressions in one value`},
		{"845 bytes", strings.Repeat(one, 845/len(one)), `param "p": ` + one + `: the value would be over 256 KiB (262144 bytes)`},
	} {
		h := newHarness(t)
		start := time.Now()
		_, err := h.run(boundedSpec, map[string]any{"p": tc.value}, nil)
		wantInvalid(t, h, err, tc.want)
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s: the run took %v to fail", tc.name, d)
		}
	}
}

// A param that uses run values is evaluated in the workflow, when the run
// knows them: past the limit it fails the run as InvalidPipeline too,
// not the workflow task.
func TestRunValueParamPastLimitFailsRun(t *testing.T) {
	h := newHarness(t)
	spec, _ := json.Marshal(boundedSpec)
	p := strings.Repeat("${date_range(run.logical_date, '2030-01-01')}", 3)
	_, err := h.runWith(runs.PipelineInput{Spec: spec, SpecFile: "test.yaml", LogicalDate: "2005-01-01",
		Params: map[string]any{"p": p}}, false, nil)
	wantInvalid(t, h, err, `param "p": ${date_range(run.logical_date, '2030-01-...: the value would be over 256 KiB`)
	// The same param for a later day is within the limit, and runs.
	h = newHarness(t)
	res, err := h.runWith(runs.PipelineInput{Spec: spec, SpecFile: "test.yaml", LogicalDate: "2029-12-30",
		Params: map[string]any{"p": p}}, false, nil)
	if err != nil || res.Status != runs.StatusSucceeded {
		t.Fatalf("2029-12-30: %v", err)
	}
}

// A node whose `with` grows past the limits from an upstream output fails
// that node (BadInput, not retried), and the run with it; the workflow
// task never fails.
func TestWithPastLimitFailsTheNode(t *testing.T) {
	spec := `name: bounded
params:
  big: {type: string}
nodes:
  - id: a
    type: step
    with: {big: "${params.big}"}
  - id: b
    needs: [a]
    type: step
    with: WITH
`
	big := strings.Repeat("z", 220<<10)
	for _, tc := range []struct{ name, with, want string }{
		{"one value", `{twice: "${nodes.a.outputs.big}${nodes.a.outputs.big}"}`,
			"${nodes.a.outputs.big}: the value would be over 256 KiB"},
		{"the whole with", `{v1: "${nodes.a.outputs.big}", v2: "${nodes.a.outputs.big}", v3: "${nodes.a.outputs.big}", v4: "${nodes.a.outputs.big}", v5: "${nodes.a.outputs.big}"}`,
			"v5: everything resolved together would be over 1 MiB"},
	} {
		h := newHarness(t)
		_, err := h.run(strings.Replace(spec, "WITH", tc.with, 1), map[string]any{"big": big}, nil)
		var appErr *temporal.ApplicationError
		if !errors.As(err, &appErr) || appErr.Type() != errtype.PipelineFailed {
			t.Fatalf("%s: error %v, want PipelineFailed", tc.name, err)
		}
		res := mustFail(t, err)
		wantNode(t, res, "a", runs.NodeSucceeded, 1)
		b := wantNode(t, res, "b", runs.NodeFailed, 0)
		if !strings.Contains(b.Error, tc.want) || !strings.Contains(b.Error, "type: BadInput, retryable: false") {
			t.Errorf("%s: node b's error %q, want %q as BadInput", tc.name, b.Error, tc.want)
		}
	}
}

// A panic in evaluation becomes an error of the node, not a workflow task
// failure that Temporal would retry forever.
func TestGuardedEvaluationRecoversPanics(t *testing.T) {
	_, err := guarded(func() (any, error) {
		var m map[string]any
		m["x"] = 1 // assignment to a nil map
		return nil, nil
	})
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || !appErr.NonRetryable() || !strings.Contains(appErr.Message(), "evaluating it panicked, a bug in retrain: assignment to entry in nil map") {
		t.Fatalf("err = %v", err)
	}
	if v, err := guarded(func() (int, error) { return 7, nil }); v != 7 || err != nil {
		t.Fatalf("no panic: %v, %v", v, err)
	}
}
