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

// A foreach over run values, a node a param turns off and on, and
// secrets that stay references.
func TestRunDryRunNightly(t *testing.T) {
	for _, c := range []struct {
		params       []string
		want, absent []string
	}{
		{nil, []string{
			"foreach ${date_range(date_add(run.logical_date, -3), date_add(run.logical_date, -1))}: 3 instances",
			`run         backfill[2] item "2026-11-19" (command)`,
			"WANDB_API_KEY: ${secret.WANDB_API_KEY}",
			`skip        notify (command): when "${params.notify}" is false`,
			"5 nodes: 3 run, 1 skipped, 1 depend on outputs",
		}, []string{"SLACK_TOKEN"}},
		{[]string{"-p", "notify=true", "-p", "model=ranker"}, []string{
			"run         notify (command)",
			"SLACK_TOKEN: ${secret.SLACK_TOKEN}",
			"- ranker trained for 2026-11-20",
			"- --model=ranker",
			"5 nodes: 4 run, 0 skipped, 1 depend on outputs",
		}, nil},
	} {
		var out, errOut bytes.Buffer
		cmd := NewRunCommand(&App{Out: &out, Err: &errOut})
		cmd.SetArgs(append([]string{"../../dags/testdata/dryrun/nightly.yaml", "--dry-run", "--logical-date", "2026-11-20"}, c.params...))
		if err := cmd.Execute(); err != nil {
			t.Fatalf("%v: %v\n%s", c.params, err, errOut.String())
		}
		for _, w := range c.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%v: output lacks %q:\n%s", c.params, w, out.String())
			}
		}
		for _, a := range c.absent {
			if strings.Contains(out.String(), a) {
				t.Errorf("%v: output has %q:\n%s", c.params, a, out.String())
			}
		}
	}
}
