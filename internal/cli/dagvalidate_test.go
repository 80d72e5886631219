package cli

import (
	"bytes"
	"strings"
	"testing"
)

// The mistakes only a run used to find, each refused by `retrain dag
// validate` at its line, with what to write instead.
func TestDAGValidateRunTimeMistakes(t *testing.T) {
	for _, c := range []struct {
		file string
		want []string // in the one line reported
	}{
		{"canary-no-direction.yaml", []string{
			"canary-no-direction.yaml:26:11: ", `node "canary" (type canary): checks[0]: `,
			"metrics.ctr.direction: required with min_absolute_change or min_relative_change",
			"checked with params max_ctr_drop at their defaults",
		}},
		{"canary-last-step-90.yaml", []string{
			"canary-last-step-90.yaml:22:12: ", "steps[1].percent: the last step's percent is 90; it must be 100",
		}},
		{"gate-metric-typo.yaml", []string{
			"gate-metric-typo.yaml:23:9: ", `metrics.AUC: node evaluate (type evaluate)'s evaluation has no metric "AUC" (did you mean "auc"?)`,
			"its metrics are accuracy, auc, calibration, count, log_loss, mean_label, mean_prediction",
		}},
		{"canary-placeholder.yaml", []string{
			"canary-placeholder.yaml:27:11: ", "checks[1].query: unknown placeholder $${verison} (did you mean \"version\"?)",
		}},
		{"canary-relative-no-version.yaml", []string{
			"canary-relative-no-version.yaml:22:11: ", "checks[0].query: the check compares with production (min_relative_change -0.02 (higher_is_better)) but its query selects no version",
		}},
	} {
		t.Run(c.file, func(t *testing.T) {
			var out, errOut bytes.Buffer
			app := &App{Out: &out, Err: &errOut}
			cmd := NewDAGCommand(app)
			cmd.SetArgs([]string{"validate", "../../dags/testdata/validate/" + c.file})
			cmd.SetOut(&out)
			cmd.SetErr(&errOut)
			err := cmd.Execute()
			if err == nil {
				t.Fatalf("validated; want it refused (stdout %q)", out.String())
			}
			// cobra adds its own "Error: 1 of 1 specs invalid" line.
			got, _, _ := strings.Cut(strings.TrimSpace(errOut.String()), "\nError: ")
			if strings.Count(got, "\n") != 0 {
				t.Errorf("want one error, got:\n%s", got)
			}
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("error lacks %q:\n%s", w, got)
				}
			}
		})
	}
}

// The same pipelines with the mistakes fixed validate: the checks refuse
// the mistake, not the shape.
func TestDAGValidateFixedPipelines(t *testing.T) {
	var out, errOut bytes.Buffer
	app := &App{Out: &out, Err: &errOut}
	cmd := NewDAGCommand(app)
	cmd.SetArgs([]string{"validate", "../../dags/testdata/validate/ok-canary-gate.yaml", "../../dags/examples/ctr-canary.yaml", "../../dags/examples/ctr-retrain.yaml"})
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
}
