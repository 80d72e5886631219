package evaluate

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/nodetype"
)

// TestSchema: the field list comes from With, with its defaults and docs,
// and the outputs from Outputs, as they were declared before.
func TestSchema(t *testing.T) {
	typ := Type(nil, nodetest.Quiet)
	if err := typ.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []dags.Field{
		{Name: "candidate", Type: dags.FieldString, Required: true},
		{Name: "data", Type: dags.FieldString, Required: true},
		{Name: "dataset", Type: dags.FieldString, Default: split.EvalDataset},
		{Name: "model", Type: dags.FieldString},
		{Name: "baseline", Type: dags.FieldString, Default: models.DefaultAlias},
		{Name: "slices", Type: dags.FieldBool},
		{Name: "max_slices", Type: dags.FieldInt, Default: "20"},
		{Name: "evaluator", Type: dags.FieldString, Default: BuiltinEvaluator},
		{Name: "argv", Type: dags.FieldStringList},
		{Name: "env", Type: dags.FieldStringMap},
		{Name: "dir", Type: dags.FieldString},
		{Name: "data_format", Type: dags.FieldString, Default: split.FormatParquet},
	}
	got := typ.NodeType.Fields
	if len(got) != len(want) {
		t.Fatalf("fields %+v, want %+v", got, want)
	}
	for i, f := range got {
		if f.Doc == "" || strings.Contains(f.Doc, "default") {
			t.Errorf("field %s: doc %q: want one, without the default", f.Name, f.Doc)
		}
		f.Doc = ""
		if !reflect.DeepEqual(f, want[i]) {
			t.Errorf("field %+v, want %+v", f, want[i])
		}
	}
	wantOut := []string{"evaluation", "candidate", "baseline", "baseline_version", "candidate_id", "has_baseline", "metrics_uri",
		"rows", "window", "dates", "summary", MetricAUC, MetricLogLoss, MetricAccuracy, MetricCalibration}
	if !slices.Equal(typ.NodeType.Outputs, wantOut) {
		t.Errorf("outputs %v, want %v", typ.NodeType.Outputs, wantOut)
	}
	if EvaluateType.Name != Name || len(EvaluateType.Fields) != len(want) {
		t.Errorf("EvaluateType %+v", EvaluateType)
	}
}

// TestDefaults: a block without the optional keys gets the tags' defaults
// and passes the run's checks; explicit values that once meant "the
// default" (max_slices: 0, dataset: "") are refused, as the validator does.
func TestDefaults(t *testing.T) {
	w, err := nodetype.DecodeWith[With](map[string]any{"candidate": "s3://b/m/", "data": "s3://b/s/"})
	if err != nil {
		t.Fatal(err)
	}
	if w.Dataset != split.EvalDataset || w.Baseline != models.DefaultAlias || w.MaxSlices != 20 || w.Slices || w.Model != "" ||
		w.Evaluator != BuiltinEvaluator || w.DataFormat != split.FormatParquet || w.Argv != nil {
		t.Fatalf("defaults %+v", w)
	}
	if err := w.check(); err != nil {
		t.Fatal(err)
	}
	// Through the node: the defaults pass, and it stops at the missing store.
	in := nodetype.Input{Pipeline: "p", RunID: "r", Node: "ev", Type: Name, With: map[string]any{"candidate": "s3://b/m/", "data": "s3://b/s/"}}
	if _, err := nodetest.Run(t, Type(nil, nodetest.Quiet).Run, in, nil); nodetest.ErrType(err) != errtype.NoObjectStore {
		t.Fatalf("without a store: %v", err)
	}
	for _, bad := range []map[string]any{{"max_slices": 0}, {"dataset": ""}, {"dataset": "test"},
		{"evaluator": "command"}, {"evaluator": "torch", "argv": []any{"x"}}, {"argv": []any{}}, {"data_format": "csv"}} {
		with := map[string]any{"candidate": "s3://b/m/", "data": "s3://b/s/"}
		for k, v := range bad {
			with[k] = v
		}
		in.With = with
		if _, err := nodetest.Run(t, Type(nil, nodetest.Quiet).Run, in, nil); nodetest.ErrType(err) != errtype.BadInput {
			t.Errorf("%v at run time: %v, want %s", bad, err, errtype.BadInput)
		}
		// JSON numbers, as the validator sees a spec's.
		if v, ok := with["max_slices"].(int); ok {
			with["max_slices"] = float64(v)
		}
		if err := checkEvaluate(with); err == nil {
			t.Errorf("%v: Check accepts it", bad)
		}
	}
}

// The validator checks a gate's metric names against these: the builtin
// scorer's, unless an evaluator program may write its own.
func TestEvaluateMetrics(t *testing.T) {
	names, ok := evaluateMetrics("evaluation", map[string]any{"candidate": "x", "data": "y"})
	if !ok || !slices.Equal(names, []string{"accuracy", "auc", "calibration", "count", "log_loss", "mean_label", "mean_prediction"}) {
		t.Fatalf("builtin: %v %v", names, ok)
	}
	for _, with := range []map[string]any{
		{"evaluator": "command", "argv": []any{"./eval.sh"}},
		{"argv": []any{"./eval.sh"}},         // a baseline of another trainer may be scored by it
		{"evaluator": "${params.evaluator}"}, // known only at run time
	} {
		if _, ok := evaluateMetrics("evaluation", with); ok {
			t.Errorf("%v: metrics said known", with)
		}
	}
	if _, ok := evaluateMetrics("metrics_uri", map[string]any{}); ok {
		t.Error("an output that holds no metrics said known")
	}
}
