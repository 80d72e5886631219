package gate

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/activities/noop"
	"github.com/retrain-ml/retrain/internal/gate"
	"github.com/retrain-ml/retrain/nodetype"

	"github.com/retrain-ml/retrain/dags"
	"gopkg.in/yaml.v3"
)

// gateSpec compiles a one-node spec around a gate's `with` block, the way
// `retrain dag validate` and the worker check a spec before a run.
func gateSpec(t *testing.T, with string) error {
	t.Helper()
	spec := `
name: g
params:
  floor: {type: number, default: 0.7}
  model: {type: string, default: smoke}
  text_floor: {type: string, default: "0.7"}
  late: {type: string, required: false}
nodes:
  - id: ev
    type: noop
    with: {evaluation: {}}
  - id: gate
    type: gate
    needs: [ev]
    with:
` + with
	s, err := dags.Parse("g.yaml", []byte(spec))
	if err != nil {
		return err
	}
	_, err = dags.Compile(s, nodetest.Registry(t, append(Types(nil), noop.Type())...), nil)
	return err
}

func TestGateValidatedWithTheSpec(t *testing.T) {
	tests := []struct {
		name, with, wantErr string
	}{
		{"valid", `
      evaluation: ${nodes.ev.outputs.evaluation}
      metrics: {auc: {direction: higher_is_better, min: 0.7, min_absolute_change: -0.01}}`, ""},
		{"no metrics at all", `
      evaluation: ${nodes.ev.outputs.evaluation}
      metrics: {}`, "metrics"},
		{"typo in a check", `
      evaluation: ${nodes.ev.outputs.evaluation}
      metrics: {auc: {direction: higher_is_better, relatve: 0.01}}`, "relatve"},
		{"change threshold without direction", `
      evaluation: ${nodes.ev.outputs.evaluation}
      metrics: {auc: {min_absolute_change: 0.01}}`, "direction"},
		{"min above max", `
      evaluation: ${nodes.ev.outputs.evaluation}
      metrics: {auc: {min: 0.9, max: 0.8}}`, "min"},
		{"block with nothing to block", `
      evaluation: ${nodes.ev.outputs.evaluation}
      metrics: {auc: {min: 0.7}}
      no_baseline: block`, "block"},
		{"unknown no_baseline", `
      evaluation: ${nodes.ev.outputs.evaluation}
      metrics: {auc: {min: 0.7}}
      no_baseline: maybe`, "maybe"},
		{"a reference in a threshold is checked at run time", `
      evaluation: ${nodes.ev.outputs.evaluation}
      metrics: {auc: {direction: higher_is_better, min: "${params.floor}"}}`, ""},
		{"the other metrics are still checked", `
      evaluation: ${nodes.ev.outputs.evaluation}
      metrics:
        auc: {direction: higher_is_better, min: "${params.floor}"}
        log_loss: {direction: sideways, min_relative_change: 0.1}`, "sideways"},
		{"a threshold fed a string param is refused before the run", `
      evaluation: ${nodes.ev.outputs.evaluation}
      metrics: {auc: {direction: higher_is_better, min: "${params.model}"}}`, `with.metrics.auc.min: ${params.model} is a string ("smoke"), want number`},
		{"numeric text converts, as at run time", `
      evaluation: ${nodes.ev.outputs.evaluation}
      metrics: {auc: {direction: higher_is_better, min: "${params.text_floor}"}}`, ""},
		{"a param without a default is left to run time", `
      evaluation: ${nodes.ev.outputs.evaluation}
      metrics: {auc: {direction: higher_is_better, min: "${params.late}"}}`, ""},
		{"candidate metrics are numbers", `
      candidate: {auc: "${params.model}"}
      metrics: {auc: {min: 0.7}}`, "with.candidate.auc"},
		{"evaluation and candidate both", `
      evaluation: ${nodes.ev.outputs.evaluation}
      candidate: {auc: 0.8}
      metrics: {auc: {min: 0.7}}`, "not both"},
		{"neither evaluation nor candidate", `
      metrics: {auc: {min: 0.7}}`, "evaluation"},
		{"bad on_reject", `
      candidate: {auc: 0.8}
      metrics: {auc: {min: 0.7}}
      on_reject: explode`, "on_reject"},
		{"bad wait", `
      candidate: {auc: 0.8}
      metrics: {auc: {min: 0.7}}
      wait_for_approval: soon`, "wait_for_approval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := gateSpec(t, tt.with)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("accepted, want an error about %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("error %q does not mention %q", err, tt.wantErr)
			}
		})
	}
}

func TestDecideGate(t *testing.T) {
	metrics := map[string]any{
		"auc":      map[string]any{"direction": "higher_is_better", "min": 0.7, "min_absolute_change": -0.005},
		"log_loss": map[string]any{"direction": "lower_is_better", "min_relative_change": -0.02},
	}
	eval := func(cand, base map[string]any, version string) map[string]any {
		var b any
		if base != nil {
			b = base
		}
		return map[string]any{"candidate": cand, "baseline": b, "baseline_version": version, "candidate_id": "sha256:c"}
	}
	tests := []struct {
		name       string
		with       map[string]any
		passed     bool
		wantErr    string
		wantReason string
	}{
		{"first model, value bounds only", map[string]any{"metrics": metrics,
			"evaluation": eval(map[string]any{"auc": 0.76, "log_loss": 0.39}, nil, "")}, true, "", ""},
		{"first model below the floor", map[string]any{"metrics": metrics,
			"evaluation": eval(map[string]any{"auc": 0.6, "log_loss": 0.39}, nil, "")}, false, "", "auc"},
		{"no worse than production", map[string]any{"metrics": metrics,
			"evaluation": eval(map[string]any{"auc": 0.762, "log_loss": 0.395}, map[string]any{"auc": 0.765, "log_loss": 0.39}, "v1")}, true, "", ""},
		{"log loss regressed more than 2%", map[string]any{"metrics": metrics,
			"evaluation": eval(map[string]any{"auc": 0.77, "log_loss": 0.40}, map[string]any{"auc": 0.765, "log_loss": 0.39}, "v1")}, false, "", "log_loss"},
		{"AUC null (one class) fails, it does not pass", map[string]any{"metrics": metrics,
			"evaluation": eval(map[string]any{"auc": nil, "log_loss": 0.39}, nil, "")}, false, "", "auc"},
		{"metric missing from the evaluation", map[string]any{"metrics": metrics,
			"evaluation": eval(map[string]any{"auc": 0.8}, nil, "")}, false, "", "log_loss"},
		{"candidate metrics given directly, as text", map[string]any{"metrics": metrics,
			"candidate": map[string]any{"auc": "0.8", "log_loss": "0.3"}}, true, "", ""},
		{"a metric that is not a number", map[string]any{"metrics": metrics,
			"candidate": map[string]any{"auc": "high", "log_loss": 0.3}}, false, `candidate: auc: want a number, got "high"`, ""},
		{"NaN written as text is refused, not read as a figure", map[string]any{"metrics": metrics,
			"candidate": map[string]any{"auc": "nan", "log_loss": 0.3}}, false, `candidate: auc: "nan" is not a finite number`, ""},
		{"any Go number is a figure", map[string]any{"metrics": metrics,
			"candidate": map[string]any{"auc": json.Number("0.8"), "log_loss": float32(0.25)},
			"baseline":  map[string]any{"auc": int64(0), "log_loss": 0.3}}, true, "", ""},
		{"unresolved threshold", map[string]any{"metrics": map[string]any{"auc": map[string]any{"min": "${params.x}"}},
			"candidate": map[string]any{"auc": 0.8}}, false, "auc", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := DecideGate(tt.with)
			if tt.wantErr != "" {
				if !strings.Contains(d.Error, tt.wantErr) {
					t.Fatalf("error %q, want one about %q", d.Error, tt.wantErr)
				}
				return
			}
			if d.Error != "" {
				t.Fatalf("error: %s", d.Error)
			}
			if d.Result.Passed != tt.passed {
				t.Fatalf("passed %v, want %v: %s", d.Result.Passed, tt.passed, d.Result.Reason)
			}
			if tt.wantReason != "" && !strings.Contains(d.Result.Reason, tt.wantReason) {
				t.Errorf("reason %q does not name %q", d.Result.Reason, tt.wantReason)
			}
			if d.OnReject != RejectSkip || d.Wait != 0 {
				t.Errorf("defaults: on_reject %q, wait %v", d.OnReject, d.Wait)
			}
			out := GateOutputs(d.Result, false)
			if out.Passed != tt.passed || out.CandidateID != d.Result.CandidateID {
				t.Errorf("outputs %v", out)
			}
		})
	}
}

func TestRejectionMessageNamesFigures(t *testing.T) {
	d := DecideGate(map[string]any{
		"metrics":      map[string]any{"auc": map[string]any{"min": 0.7}},
		"candidate":    map[string]any{"auc": 0.61},
		"on_reject":    "fail",
		"baseline":     map[string]any{"auc": 0.75},
		"candidate_id": "c1", "baseline_version": "v3",
		"wait_for_approval": "30m",
	})
	if d.Error != "" || d.Result.Passed || d.OnReject != RejectFail || d.Wait.Minutes() != 30 {
		t.Fatalf("decision %+v", d)
	}
	msg := RejectionMessage(d.Result)
	for _, want := range []string{"c1", "v3", "0.61", "0.7"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
}

// TestGateRefusesMetricsOfDifferentRows: a candidate and a baseline scored
// on different windows or rows are not comparable, whatever the figures.
func TestGateRefusesMetricsOfDifferentRows(t *testing.T) {
	scope := func(dates []any, rows float64) map[string]any {
		return map[string]any{"split": "s3://b/split/manifest.json", "dataset": "eval", "rows": rows, "dates": dates,
			"window": map[string]any{"start": dates[0], "end": dates[len(dates)-1]}}
	}
	base := func(cd, bd map[string]any) map[string]any {
		return map[string]any{
			"metrics":   map[string]any{"auc": map[string]any{"direction": "higher_is_better", "min_absolute_change": -0.01, "min": 0.5}},
			"candidate": map[string]any{"auc": 0.8}, "baseline": map[string]any{"auc": 0.79},
			"candidate_data": cd, "baseline_data": bd,
		}
	}
	same := scope([]any{"2026-11-04"}, 500)
	if d := DecideGate(base(same, scope([]any{"2026-11-04"}, 500))); d.Error != "" || !d.Result.Passed {
		t.Fatalf("same rows: %+v", d)
	}
	for name, other := range map[string]map[string]any{
		"another day":     scope([]any{"2026-11-14"}, 500),
		"other row count": scope([]any{"2026-11-04"}, 499),
	} {
		d := DecideGate(base(same, other))
		if !strings.Contains(d.Error, "refusing to compare: the candidate was evaluated on 500 eval rows of 2026-11-04") {
			t.Errorf("%s: %+v", name, d)
		}
	}
	// An evaluate node's evaluation carries both records.
	ev := map[string]any{
		"metrics":    map[string]any{"auc": map[string]any{"min": 0.5}},
		"evaluation": map[string]any{"candidate": map[string]any{"auc": 0.8}, "baseline": map[string]any{"auc": 0.7}, "candidate_data": same, "baseline_data": scope([]any{"2026-11-03", "2026-11-04"}, 900)},
	}
	if d := DecideGate(ev); !strings.Contains(d.Error, "refusing to compare") {
		t.Errorf("evaluation: %+v", d)
	}
}

// TestSchema: the field list comes from With, with its defaults and docs,
// and the outputs from Outputs, as they were declared before; the type
// still runs as the Gate workflow.
func TestSchema(t *testing.T) {
	typ := Types(nil)[0]
	if err := typ.Validate(); err != nil {
		t.Fatal(err)
	}
	nt := typ.NodeType
	if nt.Name != Name || nt.Kind != dags.KindWorkflow || nt.Target != GateWorkflow || typ.TargetName() != "Gate" || typ.Workflow == nil {
		t.Fatalf("type %+v", nt)
	}
	want := []dags.Field{
		{Name: "metrics", Type: dags.FieldAny, Required: true, Nested: []dags.Nested{
			{Path: "*.direction", Type: dags.FieldString}, {Path: "*.min", Type: dags.FieldNumber}, {Path: "*.max", Type: dags.FieldNumber},
			{Path: "*.min_absolute_change", Type: dags.FieldNumber}, {Path: "*.min_relative_change", Type: dags.FieldNumber},
		}},
		// The modes package gate takes the empty value for.
		{Name: "no_baseline", Type: dags.FieldString, Default: string(gate.NoBaselineValueOnly)},
		{Name: "zero_baseline", Type: dags.FieldString, Default: string(gate.ZeroBaselineFail)},
		{Name: "evaluation", Type: dags.FieldAny},
		{Name: "candidate", Type: dags.FieldAny, Nested: []dags.Nested{{Path: "*", Type: dags.FieldNumber}}},
		{Name: "baseline", Type: dags.FieldAny},
		{Name: "baseline_version", Type: dags.FieldString},
		{Name: "candidate_id", Type: dags.FieldString},
		{Name: "candidate_data", Type: dags.FieldAny},
		{Name: "baseline_data", Type: dags.FieldAny},
		{Name: "wait_for_approval", Type: dags.FieldDuration},
		{Name: "on_reject", Type: dags.FieldString, Default: RejectSkip},
	}
	if len(nt.Fields) != len(want) {
		t.Fatalf("fields %+v, want %+v", nt.Fields, want)
	}
	for i, f := range nt.Fields {
		if f.Doc == "" || strings.Contains(f.Doc, "default") {
			t.Errorf("field %s: doc %q: want one, without the default", f.Name, f.Doc)
		}
		f.Doc = ""
		if !reflect.DeepEqual(f, want[i]) {
			t.Errorf("field %+v, want %+v", f, want[i])
		}
	}
	wantOut := []string{"passed", "reason", "forced", "forced_by", "force_reason", "comparisons", "failed",
		"refused_approvals", "baseline_version", "baseline_logical_date", "baseline_source", "candidate_id", "has_baseline", "waited", "summary"}
	if !slices.Equal(nt.Outputs, wantOut) {
		t.Errorf("outputs %v, want %v", nt.Outputs, wantOut)
	}
	if GateType.Name != Name || len(GateType.Fields) != len(want) {
		t.Errorf("GateType %+v", GateType)
	}
	// Every declared output is in the map the workflow returns, even the
	// empty ones (a reference to ${nodes.gate.outputs.forced_by} resolves).
	out, err := nodetype.Outputs(GateOutputs(gate.Result{Passed: true}, false))
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(out)); !slices.Equal(got, slices.Sorted(slices.Values(wantOut))) {
		t.Errorf("output keys %v, want %v", got, wantOut)
	}
}

// TestDecideGateDefaults: the tags' defaults decide as an absent key did;
// explicit values are taken, and an explicit empty on_reject is refused.
func TestDecideGateDefaults(t *testing.T) {
	with := func(extra map[string]any) map[string]any {
		w := map[string]any{"metrics": map[string]any{"auc": map[string]any{"direction": "higher_is_better", "min_absolute_change": 0.01}},
			"candidate": map[string]any{"auc": 0.8}}
		for k, v := range extra {
			w[k] = v
		}
		return w
	}
	d := DecideGate(with(nil))
	if d.Error != "" || d.OnReject != RejectSkip || d.Wait != 0 {
		t.Fatalf("defaults: %+v", d)
	}
	// no_baseline defaults to value_only: the change check is skipped, and
	// with nothing else checked the gate does not pass.
	if d.Result.Passed || !strings.Contains(d.Result.Reason, "no_baseline: value_only") {
		t.Errorf("no baseline, default mode: %+v", d.Result)
	}
	if d := DecideGate(with(map[string]any{"no_baseline": "bless"})); d.Error != "" || !d.Result.Passed {
		t.Errorf("no_baseline bless: %+v", d)
	}
	if d := DecideGate(with(map[string]any{"on_reject": "fail", "wait_for_approval": "1h"})); d.OnReject != RejectFail || d.Wait != time.Hour {
		t.Errorf("explicit: %+v", d)
	}
	if d := DecideGate(with(map[string]any{"on_reject": ""})); !strings.Contains(d.Error, "on_reject") {
		t.Errorf("empty on_reject: %+v", d)
	}
	if d := DecideGate(with(map[string]any{"baseline_version": 3})); !strings.Contains(d.Error, "baseline_version") {
		t.Errorf("a number for baseline_version: %+v", d)
	}
}

// TestOldThresholdKeysRefused: absolute and relative are refused when the
// spec is validated, at the with block's line and also when a reference
// holds the value, and by DecideGate at run time, each time with the new
// setting that means the same.
func TestOldThresholdKeysRefused(t *testing.T) {
	tests := []struct {
		name, metrics string
		want          []string
	}{
		{"absolute, higher_is_better", `{auc: {direction: higher_is_better, absolute: -0.01}}`, []string{
			`g.yaml:15:5: node "gate" (type gate): invalid gate config: ` +
				`metric auc: "absolute" is no longer accepted: its meaning differed from TFX's for lower_is_better metrics. ` +
				`Write min_absolute_change: -0.01 (the least improvement of auc over the baseline, in its direction; negative allows that much worse)`}},
		{"absolute, lower_is_better", `{log_loss: {direction: lower_is_better, absolute: -1}}`, []string{
			`Write min_absolute_change: -1 (the least improvement of log_loss over the baseline, in its direction; negative allows that much worse). ` +
				`If the value was copied from a TFX config, where a lower_is_better threshold is the most the metric may rise over the baseline, write min_absolute_change: 1 instead`}},
		{"relative, lower_is_better", `{log_loss: {direction: lower_is_better, relative: -0.02}}`, []string{
			`metric log_loss: "relative" is no longer accepted`, `Write min_relative_change: -0.02 (`, `write min_relative_change: 0.02 instead`}},
		{"relative, higher_is_better", `{auc: {direction: higher_is_better, relative: 0.001}}`, []string{
			`metric auc: "relative" is no longer accepted`, `Write min_relative_change: 0.001 (`}},
		{"a reference does not hide it", `{auc: {direction: higher_is_better, min: "${params.floor}", absolute: -0.01}}`, []string{
			`metric auc: "absolute" is no longer accepted`, `Write min_absolute_change: -0.01 (`}},
		{"nor a reference as the value", `{auc: {direction: higher_is_better, absolute: "${params.floor}"}}`, []string{
			`Write min_absolute_change: ${params.floor} (`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := gateSpec(t, "      candidate: {auc: 0.8, log_loss: 0.3}\n      metrics: "+tt.metrics+"\n")
			if err == nil {
				t.Fatal("the spec validated")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "unknown key") {
				t.Errorf("error %q also calls it unknown", err)
			}
			// At run time, with the references resolved.
			with := map[string]any{"candidate": map[string]any{"auc": 0.8, "log_loss": 0.3}}
			var m map[string]any
			if err := yaml.Unmarshal([]byte(strings.ReplaceAll(tt.metrics, "${params.floor}", "0.7")), &m); err != nil {
				t.Fatal(err)
			}
			with["metrics"] = m
			d := DecideGate(with)
			if !strings.Contains(d.Error, "is no longer accepted") || !strings.Contains(d.Error, "Write min_") {
				t.Errorf("run time: %+v", d)
			}
		})
	}
}

// TestGateSummary: the one-line verdict counts passed, failed and skipped
// checks and names the baseline.
func TestGateSummary(t *testing.T) {
	pass, fail, skip := gate.Comparison{Passed: true}, gate.Comparison{}, gate.Comparison{Passed: true, Skipped: true}
	for _, c := range []struct {
		r    gate.Result
		want string
	}{
		{gate.Result{Passed: true, Comparisons: []gate.Comparison{pass, pass, pass, skip, skip}}, "passed 3 of 5 checks, 2 skipped (no baseline)"},
		{gate.Result{Passed: true, HasBaseline: true, BaselineVersion: "v1", Comparisons: []gate.Comparison{pass, pass}}, "passed 2 of 2 checks against v1"},
		{gate.Result{HasBaseline: true, BaselineVersion: "v2", Comparisons: []gate.Comparison{pass, fail, fail}}, "failed 2 of 3 checks against v2"},
		{gate.Result{Passed: true, Forced: true, ForcedBy: "alice", HasBaseline: true, BaselineVersion: "v2", Comparisons: []gate.Comparison{fail}}, "forced through by alice (1 of 1 checks failed) against v2"},
	} {
		if got := gateSummary(c.r); got != c.want {
			t.Errorf("gateSummary = %q, want %q", got, c.want)
		}
	}
}

// TestWaitingDetails: a waiting gate's page says what failed, until when,
// and the command that approves the candidate.
func TestWaitingDetails(t *testing.T) {
	r := gate.Result{CandidateID: "sha256:ab", HasBaseline: true, BaselineVersion: "v2",
		Comparisons: []gate.Comparison{{Metric: "auc", Check: "value_min", Reason: "auc 0.61 is below min 0.65"}, {Metric: "log_loss", Passed: true}}}
	got := waitingDetails(r, time.Date(2026, 11, 25, 19, 0, 0, 0, time.UTC), "ctr-retrain-1", nil)
	for _, want := range []string{"until 2026-11-25 19:00:00 UTC", "candidate sha256:ab against v2", "- auc value_min: auc 0.61 is below min 0.65",
		"`retrain approve ctr-retrain-1 --force --reason \"...\"`"} {
		if !strings.Contains(got, want) {
			t.Errorf("details lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "log_loss") {
		t.Errorf("details list a passed check:\n%s", got)
	}
}

// A threshold on a metric the candidate cannot have is refused at its
// line; where the metrics are not known before the run, nothing is said.
func TestGateMetricNamesChecked(t *testing.T) {
	err := gateSpec(t, `
      candidate: {auc: "${params.floor}", log_loss: 0.4}
      metrics:
        auc: {min: 0.7}
        logloss: {max: 0.5}`)
	want := `g.yaml:20:9: node "gate" (type gate): metrics.logloss: the candidate map has no metric "logloss" (did you mean "log_loss"?), so the gate would reject every candidate; its metrics are auc, log_loss`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	// The evaluation of a node whose type does not declare its metrics
	// (here a noop): not known, not checked.
	if err := gateSpec(t, `
      evaluation: ${nodes.ev.outputs.evaluation}
      metrics: {AUC: {min: 0.7}}`); err != nil {
		t.Fatalf("unknown metrics refused: %v", err)
	}
}
