package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/dags"
)

// `retrain run PIPELINE --dry-run` needs no server: no address is
// configured here, and nothing listens.
func TestRunDryRun(t *testing.T) {
	var out, errOut bytes.Buffer
	app := &App{Out: &out, Err: &errOut}
	cmd := NewRunCommand(app)
	cmd.SetArgs([]string{"ctr-retrain", "--dry-run", "--schedule", "daily", "--logical-date", "2026-11-20", "-p", "epochs=5"})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	got := out.String()
	for _, want := range []string{
		"dry run of pipeline ctr-retrain (built-in example ctr-retrain.yaml): nothing is started",
		"logical date 2026-11-20 (logical time 2026-11-20T00:00:00Z)",
		`  start_date: "2026-11-16"`, // the schedule's ${date_add(run.logical_date, -4)}
		"  epochs: 5",
		"  run         train (train)",
		"                epochs: 5",
		"                data: ${nodes.split.outputs.uri}",
		`  depends     deploy (deploy): when "${nodes.gate.outputs.passed}" reads nodes.gate.outputs.passed, known only when the run gets there`,
		"  depends     smoke (command): runs if upstream node deploy runs",
		"  on failure  undeploy (rollback_model): runs only if the run fails after node deploy completed",
		"11 nodes: 9 run, 0 skipped, 2 depend on outputs known only when the run gets there",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

func TestRunDryRunJSON(t *testing.T) {
	var out bytes.Buffer
	err := dryRun(&out, dryRunOptions{target: "foreach", params: map[string]any{"markets": `["us","de"]`}, asJSON: true,
		now: time.Date(2026, 11, 20, 6, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	var d dags.DryRunPlan
	if err := json.Unmarshal(out.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	if d.LogicalTime != "2026-11-20T06:00:00Z" || d.Nodes[0].Foreach == nil || d.Nodes[0].Foreach.Count != 2 ||
		d.Nodes[0].Foreach.Instances[1].With["argv"].([]any)[4] != "de" {
		t.Fatalf("got %s", out.String())
	}
}

func TestRunDryRunRefuses(t *testing.T) {
	for _, c := range []struct {
		o    dryRunOptions
		want string
	}{
		{dryRunOptions{target: "nope"}, `pipeline "nope" not found`},
		{dryRunOptions{target: "ctr-retrain", schedule: "hourly"}, `--schedule "hourly": pipeline ctr-retrain has no such schedule; its schedules: daily`},
		{dryRunOptions{target: "ctr-retrain", params: map[string]any{"epochz": "1"}}, `unknown param "epochz" (did you mean "epochs"?)`},
		{dryRunOptions{target: "../../dags/testdata/validate/canary-last-step-90.yaml"}, "steps[1].percent: the last step's percent is 90"},
	} {
		var out bytes.Buffer
		err := dryRun(&out, c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
}
