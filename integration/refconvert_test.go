package integration

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/runs"
)

// TestRefConvertDiamondNumberInArgv: a whole-string reference to a number
// output in an argv item is formatted as the string field wants, instead of
// failing the command's decode of `with` (BadInput).
func TestRefConvertDiamondNumberInArgv(t *testing.T) {
	queue := newQueue(t)
	startWorker(t, queue)
	res := runSpec(t, queue, `
name: diamond
nodes:
  - {id: root, type: command, with: {argv: ["true"]}}
  - {id: left, type: command, needs: [root], with: {argv: ["true"]}}
  - {id: right, type: command, needs: [root], with: {argv: ["true"]}}
  - {id: join, type: command, needs: [left, right], with: {argv: ["echo", "${nodes.root.outputs.exit_code}"]}}
`, nil)
	wantStatus(t, res, runs.StatusSucceeded)
	if out := node(t, res, "join").Outputs["stdout"]; out != "0" {
		t.Errorf("join stdout = %#v, want \"0\"", out)
	}
}

const refConvertBadSpec = `name: badparam
params:
  epochs: {type: string, default: "abc"}
nodes:
  - {id: first, type: command, with: {argv: ["true"]}}
  - id: train
    type: train
    needs: [first]
    with:
      data: "${nodes.first.outputs.stdout}"
      epochs: "${params.epochs}"
`

// TestRefConvertStringParamIntoIntField: "abc" flowing into train's int
// field epochs is refused by `retrain dag validate` with file, line, node and
// field, and an inline spec started past the CLI (as from the Web UI) fails
// as InvalidPipeline before any node starts, with the same message.
func TestRefConvertStringParamIntoIntField(t *testing.T) {
	const msg = `node train: with.epochs: ${params.epochs} is a string ("abc"), want int`
	file := filepath.Join(t.TempDir(), "badparam.yaml")
	if err := os.WriteFile(file, []byte(refConvertBadSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	root := cli.NewRoot(&cli.App{Out: &out, Err: &errOut}, "retrain")
	root.SetArgs([]string{"dag", "validate", file})
	if err := root.ExecuteContext(context.Background()); err == nil {
		t.Fatalf("dag validate accepted the spec: %s", out.String())
	}
	if want := file + ":11:7: " + msg; !strings.Contains(errOut.String(), want) {
		t.Errorf("dag validate said %q, want %q", errOut.String(), want)
	}

	queue := newQueue(t)
	startWorker(t, queue)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run, err := runs.Start(ctx, tclient, runs.Request{Spec: []byte(refConvertBadSpec), SpecFile: "inline.yaml", TaskQueue: queue})
	if err != nil {
		t.Fatal(err)
	}
	err = tclient.GetWorkflow(ctx, run.ID, "").Get(ctx, nil)
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != errtype.InvalidPipeline {
		t.Fatalf("run ended with %v, want an %s error", err, errtype.InvalidPipeline)
	}
	if want := "inline.yaml:11:7: " + msg; !strings.Contains(appErr.Error(), want) {
		t.Errorf("run error %q, want %q", appErr.Error(), want)
	}
	res, err := runs.Wait(ctx, tclient, run.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range res.Nodes {
		if n.Status != runs.NodePending && n.Status != runs.NodeCancelled {
			t.Errorf("node %s %s: nodes must not start", n.ID, n.Status)
		}
	}
}
