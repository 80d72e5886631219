package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/runs"
)

// TestCommandOutputsFile: a command writes {"auc": 0.71, "model_uri": ...}
// to $RETRAIN_OUTPUTS (the example pipeline outputs, by name); the
// downstream commands get the values, with their types, through
// ${nodes.score.outputs.KEY}.
func TestCommandOutputsFile(t *testing.T) {
	queue := newQueue(t)
	startWorker(t, queue)
	res := runRequest(t, runs.Request{Pipeline: "outputs", TaskQueue: queue}, 2*time.Minute)
	wantStatus(t, res, runs.StatusSucceeded)
	score := node(t, res, "score")
	if score.Outputs["auc"] != 0.71 || score.Outputs["model_uri"] != "s3://models/ctr/v7" || score.Outputs["exit_code"] != float64(0) {
		t.Errorf("score outputs %v", score.Outputs)
	}
	if out := node(t, res, "report").Outputs["stdout"]; out != "0.71" {
		t.Errorf("report stdout = %#v, want \"0.71\"", out)
	}
	if out := node(t, res, "publish").Outputs["stdout"]; out != "publishing s3://models/ctr/v7 (auc 0.71)" {
		t.Errorf("publish stdout = %#v", out)
	}

	// The gate compared two commands' structured outputs: 0.71 against 0.69.
	if g := node(t, res, "gate"); g.Status != runs.NodeSucceeded || g.Outputs["passed"] != true {
		t.Errorf("gate on command outputs: %s %v", g.Status, g.Outputs)
	}
	// Below the threshold param, the when on the number skips publish.
	res = runRequest(t, runs.Request{Pipeline: "outputs", TaskQueue: queue, Params: map[string]any{"min_auc": 0.8}}, 2*time.Minute)
	wantStatus(t, res, runs.StatusSucceeded)
	if st := node(t, res, "publish").Status; st != runs.NodeSkipped {
		t.Errorf("publish %s, want skipped", st)
	}
}

// TestCommandOutputsRejected: a declared output of the wrong type, and a
// file that is not JSON, fail the node on its first attempt (BadOutput is
// not retried) and stop the run before the nodes that would use them.
func TestCommandOutputsRejected(t *testing.T) {
	queue := newQueue(t)
	startWorker(t, queue)
	for _, tc := range []struct {
		name, write, want string
	}{
		{"mistyped", `{"auc": "n/a", "model_uri": "s3://m"}`,
			`node score: output auc is a string ("n/a"), want number (type: BadOutput, retryable: false)`},
		{"not JSON", `auc=0.71`,
			`node score: the outputs file ($RETRAIN_OUTPUTS) is not JSON: line 1, column 1: invalid character 'a' looking for beginning of value (type: BadOutput, retryable: false)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runSpec(t, queue, `
name: rejected
defaults: {retry: {max_attempts: 3, initial_interval: 1s}}
nodes:
  - id: score
    type: command
    with: {argv: [sh, -c, 'printf %s "$1" > "$RETRAIN_OUTPUTS"', sh, '`+tc.write+`']}
    outputs: {auc: number, model_uri: string}
  - {id: report, type: command, needs: [score], with: {argv: [echo, "${nodes.score.outputs.auc}"]}}
`, nil)
			wantStatus(t, res, runs.StatusFailed)
			score := node(t, res, "score")
			if score.Status != runs.NodeFailed || score.Attempts != 1 {
				t.Errorf("score %s after %d attempts, want failed after 1", score.Status, score.Attempts)
			}
			if !strings.Contains(res.Error, tc.want) {
				t.Errorf("run error %q, want it to hold %q", res.Error, tc.want)
			}
			if st := node(t, res, "report").Status; st != runs.NodeCancelled {
				t.Errorf("report %s, want cancelled", st)
			}
		})
	}
}
