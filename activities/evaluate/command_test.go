package evaluate

import (
	"context"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/activities/internal/objects"
	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/activities/split/splittest"
	"github.com/retrain-ml/retrain/activities/train"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/dataset"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/internal/npy"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/internal/trainer"
	"github.com/retrain-ml/retrain/nodetype"
)

const evalRows = 1000

// fixture is a store with a split, a model of the builtin trainer and a
// model of another trainer (a JSON file), shared by the command
// evaluator's tests.
type fixture struct {
	st      *s3store.Store
	split   string
	builtin string // the builtin model's folder
	other   string // the other trainer's model folder
	dir     string // the evaluator scripts
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	f := &fixture{st: st, split: splittest.Write(t, st, "r1", 3000, evalRows), dir: t.TempDir()}
	tr := &train.Trainers{Store: st, Logger: nodetest.Quiet}
	out, err := nodetest.Run(t, tr.Run, nodetype.Input{Pipeline: "test", RunID: "r1", Node: "train", Type: "train",
		With: map[string]any{"data": f.split, "epochs": 1, "batch_size": 256, "dim": 4, "buckets": 1024}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.builtin = out["model_uri"].(string)
	if _, err := st.PutBytes(context.Background(), "other/cand/model.json", []byte(`{"weight": 2}`)); err != nil {
		t.Fatal(err)
	}
	f.other = objects.KeyURI(st, "other/cand/")
	return f
}

// script writes an executable evaluator script and returns its path.
func (f *fixture) script(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(f.dir, name)
	if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// register registers the files of a model folder of the store as a new
// version of name and makes it production.
func (f *fixture) register(t *testing.T, name, folder string) models.Version {
	t.Helper()
	ctx := context.Background()
	key, err := objects.StoreKey(f.st, folder)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := objects.DownloadPrefix(ctx, f.st, strings.TrimSuffix(key, "/")+"/", dir); err != nil {
		t.Fatal(err)
	}
	reg := models.New(f.st)
	arts, err := models.DirArtifacts(dir)
	if err != nil {
		t.Fatal(err)
	}
	v, err := reg.Register(ctx, name, arts, "", models.Meta{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Promote(ctx, name, models.DefaultAlias, v.Version, models.Actor{Name: "test"}, "test"); err != nil {
		t.Fatal(err)
	}
	return v
}

func (f *fixture) run(t *testing.T, node string, with map[string]any) (map[string]any, error) {
	t.Helper()
	with["data"] = f.split
	in := nodetype.Input{Pipeline: "test", RunID: "r1", Node: node, Type: Name, With: with}
	return nodetest.Run(t, Type(f.st, nodetest.Quiet).Run, in, nil)
}

// report reads the metrics file an evaluation wrote.
func (f *fixture) report(t *testing.T, out map[string]any) EvaluationReport {
	t.Helper()
	var r EvaluationReport
	key, _ := objects.StoreKey(f.st, out["metrics_uri"].(string))
	if err := objects.GetJSON(context.Background(), f.st, key, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// fixedEvaluator writes fixed metrics, an AUC by role, after checking the
// contract's environment; it logs the model folder and its working
// folder to $LOG.
const fixedEvaluator = `#!/bin/sh
set -e
test -f "$RETRAIN_MODEL_DIR/model.json" || { echo "no model.json in $RETRAIN_MODEL_DIR" >&2; exit 4; }
ls "$RETRAIN_EVAL_DATA"/*.parquet >/dev/null
test -n "$RETRAIN_PREDICTIONS_OUT"
echo "$RETRAIN_MODEL_ROLE $RETRAIN_MODEL_DIR $(pwd) $RETRAIN_NODE" >> "$LOG"
auc=0.7
if [ "$RETRAIN_MODEL_ROLE" = baseline ]; then auc=0.6; fi
printf '{"rows": 1000, "overall": {"auc": %s, "log_loss": 0.5, "custom": NaN}, "slices": {"2": {"rows": 1000, "auc": %s}}}' $auc $auc > "$RETRAIN_METRICS_OUT"
`

// TestCommandCandidateFixedMetrics: a program that writes metrics and no
// predictions scores a candidate of another trainer, against a builtin
// production model; both are recorded as scored on the same rows.
func TestCommandCandidateFixedMetrics(t *testing.T) {
	f := newFixture(t)
	log := filepath.Join(f.dir, "log")
	argv := []any{f.script(t, "fixed.sh", fixedEvaluator)}
	workDir := t.TempDir()

	// The builtin candidate alone: the baseline's figures to expect.
	own, err := f.run(t, "own", map[string]any{"candidate": f.builtin})
	if err != nil {
		t.Fatal(err)
	}
	f.register(t, "ctr", f.builtin)

	out, err := f.run(t, "ev", map[string]any{"candidate": f.other, "model": "ctr", "slices": true,
		"evaluator": "command", "argv": argv, "env": map[string]any{"LOG": log}, "dir": workDir})
	if err != nil {
		t.Fatal(err)
	}
	if out["auc"] != 0.7 || out["log_loss"] != 0.5 || out["has_baseline"] != true || out["baseline_version"] != "v1" || out["rows"].(float64) != evalRows {
		t.Fatalf("outputs %v", out)
	}
	cand := out["candidate"].(map[string]any)
	if cand["custom"] != nil || cand[MetricCount] != float64(evalRows) {
		t.Errorf("candidate metrics %v: want custom null (NaN) and count %d", cand, evalRows)
	}
	if base := out["baseline"].(map[string]any); base["auc"] != own["auc"] {
		t.Errorf("the builtin baseline's AUC %v, want %v as scored alone", base["auc"], own["auc"])
	}
	ev := out["evaluation"].(map[string]any)
	cs, err1 := ParseScope("candidate_data", ev["candidate_data"])
	bs, err2 := ParseScope("baseline_data", ev["baseline_data"])
	if err1 != nil || err2 != nil || bs == nil || SameScope(cs, bs) != nil || cs.Rows != evalRows || cs.Dataset != split.EvalDataset {
		t.Errorf("scopes %+v %+v: %v %v", cs, bs, err1, err2)
	}
	if ev["candidate_id"] == own["candidate_id"] || !strings.HasPrefix(ev["candidate_id"].(string), "sha256:") {
		t.Errorf("candidate id %v", ev["candidate_id"])
	}
	r := f.report(t, out)
	if !math.IsNaN(float64(r.Candidate.Overall["custom"])) || r.Candidate.Slices["2"]["auc"] != 0.7 || r.Candidate.Slices["2"][MetricCount] != evalRows {
		t.Errorf("candidate in the metrics file %+v", r.Candidate)
	}
	if r.Baseline == nil || len(r.Baseline.ROC) == 0 || r.BaselineVersion != "v1" || r.Rows != evalRows {
		t.Errorf("baseline in the metrics file %+v", r.Baseline)
	}

	// One run, as the candidate, in dir, with its model folder gone now.
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 1 {
		t.Fatalf("runs: %q", lines)
	}
	fields := strings.Fields(lines[0])
	if len(fields) != 4 || fields[0] != RoleCandidate || fields[2] != workDir || fields[3] != "ev" {
		t.Errorf("run %q", lines[0])
	}
	if _, err := os.Stat(fields[1]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the model folder %s is left behind: %v", fields[1], err)
	}
}

// TestBuiltinCandidateCommandBaseline: the production model is another
// trainer's, scored by argv even with evaluator builtin; without argv the
// node says how to score it.
func TestBuiltinCandidateCommandBaseline(t *testing.T) {
	f := newFixture(t)
	log := filepath.Join(f.dir, "log")
	f.register(t, "ctr", f.other)
	with := map[string]any{"candidate": f.builtin, "model": "ctr"}
	_, err := f.run(t, "ev", with)
	if nodetest.ErrType(err) != errtype.BadInput || !strings.Contains(err.Error(), "baseline ctr@production (version v1)") ||
		!strings.Contains(err.Error(), "evaluator: command and argv") {
		t.Fatalf("a baseline of another trainer without argv: %v", err)
	}

	with["argv"] = []any{f.script(t, "fixed.sh", fixedEvaluator)}
	with["env"] = map[string]any{"LOG": log}
	out, err := f.run(t, "ev", with)
	if err != nil {
		t.Fatal(err)
	}
	base := out["baseline"].(map[string]any)
	if base["auc"] != 0.6 || out["baseline_version"] != "v1" || out["auc"].(float64) < 0.7 {
		t.Fatalf("outputs %v", out)
	}
	if b, _ := os.ReadFile(log); !strings.HasPrefix(string(b), RoleBaseline+" ") || strings.Count(string(b), "\n") != 1 {
		t.Errorf("runs: %q", b)
	}
	if ev := out["evaluation"].(map[string]any); ev["baseline"].(map[string]any)["auc"] != 0.6 || ev["baseline_data"] == nil {
		t.Errorf("evaluation %v", ev)
	}
}

// numpyEvaluator reads the npy data and the JSON model and writes
// predictions, plus a wrong AUC the node must replace and a metric of its
// own it must keep.
const numpyEvaluator = `import json, os
import numpy as np
d = os.environ["RETRAIN_EVAL_DATA"]
schema = json.load(open(os.path.join(d, "schema.json")))
model = json.load(open(os.path.join(os.environ["RETRAIN_MODEL_DIR"], "model.json")))
dense = np.nan_to_num(np.load(os.path.join(d, "dense.npy")))
assert dense.shape == (schema["rows"], len(schema["dense"])), dense.shape
x = dense[:, schema["dense"].index("x")]
p = 1 / (1 + np.exp(-model["weight"] * x))
np.save(os.environ["RETRAIN_PREDICTIONS_OUT"], p.astype(np.float32))
with open(os.environ["RETRAIN_METRICS_OUT"], "w") as f:
    json.dump({"rows": int(schema["rows"]), "overall": {"auc": 0.1, "custom_metric": 1.5, "nan_metric": float("nan")}}, f)
`

// TestNumpyEvaluatorPredictions: a Python program reads the npy data and
// writes predictions; the node computes the standard figures from them
// the builtin way (overriding the file's) and keeps the file's others.
func TestNumpyEvaluatorPredictions(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import numpy").Run(); err != nil {
		t.Skipf("needs /usr/bin/python3 with numpy (apt-get install python3-numpy): %v", err)
	}
	f := newFixture(t)
	script := f.script(t, "eval.py", numpyEvaluator)
	out, err := f.run(t, "ev", map[string]any{"candidate": f.other, "evaluator": "command", "slices": true,
		"argv": []any{"/usr/bin/python3", script}, "data_format": "npy"})
	if err != nil {
		t.Fatal(err)
	}

	// The AUC of sigmoid(2x) on the eval rows, as the node loads them.
	sd, err := split.Open(context.Background(), f.st, f.split)
	if err != nil {
		t.Fatal(err)
	}
	data, err := sd.Load(context.Background(), f.st, split.EvalDataset)
	if err != nil {
		t.Fatal(err)
	}
	exs, err := data.Examples([]string{"x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	preds := make([]float64, len(exs))
	for i, ex := range exs {
		preds[i] = float64(float32(1 / (1 + math.Exp(-2*float64(ex.Dense[0])))))
	}
	want, err := trainer.Evaluate(preds, data.Label)
	if err != nil {
		t.Fatal(err)
	}
	cand := out["candidate"].(map[string]any)
	if auc := out["auc"].(float64); math.Abs(auc-want.AUC) > 1e-6 || auc < 0.7 {
		t.Errorf("auc %v, want %v", auc, want.AUC)
	}
	if math.Abs(out["log_loss"].(float64)-want.LogLoss) > 1e-5 || cand["custom_metric"] != 1.5 || cand["nan_metric"] != nil ||
		cand["mean_label"] != want.MeanLabel || cand[MetricCount] != float64(evalRows) {
		t.Errorf("candidate %v, want %+v", cand, want)
	}
	r := f.report(t, out)
	if len(r.Candidate.ROC) == 0 || len(r.Candidate.CalibrationBins) == 0 || len(r.Candidate.Slices) != 1 ||
		r.Candidate.Slices["2"][MetricCount] != evalRows || r.SliceColumn != "date" {
		t.Errorf("metrics file %+v", r.Candidate)
	}
}

// TestParquetOrder: with parquet data, predictions follow the files' rows,
// which the split wrote in an order other than the request ids': perfect
// predictions in file order score an AUC of 1.
func TestParquetOrder(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	uri := writeReversedSplit(t, st, 500)
	sd, err := split.Open(context.Background(), st, uri)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := checkpoint.ReadAll[any](context.Background(), st, checkpoint.Ref{Manifest: sd.ManifestKey, Dataset: split.EvalDataset})
	if err != nil {
		t.Fatal(err)
	}
	labels := make([]float32, len(rows))
	for i, r := range rows {
		labels[i] = r.(map[string]any)[dataset.ColLabel].(float32)
	}
	pre := filepath.Join(t.TempDir(), "pre.npy")
	if err := npy.WriteFile(pre, labels); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutBytes(context.Background(), "other/cand/model.json", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	f := &fixture{st: st, split: uri, dir: t.TempDir()}
	script := f.script(t, "copy.sh", `#!/bin/sh
cp "$PRE" "$RETRAIN_PREDICTIONS_OUT" && echo '{"overall": {}}' > "$RETRAIN_METRICS_OUT"
`)
	out, err := f.run(t, "ev", map[string]any{"candidate": objects.KeyURI(st, "other/cand/"), "evaluator": "command",
		"argv": []any{script}, "env": map[string]any{"PRE": pre}})
	if err != nil {
		t.Fatal(err)
	}
	if out["auc"] != 1.0 || out["accuracy"] != 1.0 {
		t.Fatalf("perfect predictions in file order: %v", out)
	}
}

// writeReversedSplit stores a split whose files hold the rows in the
// reverse of their request ids' order.
func writeReversedSplit(t *testing.T, st *s3store.Store, n int) string {
	t.Helper()
	typ := splittest.Schema.RowType()
	row := func(id int64, day int32, i int) any {
		v := reflect.New(typ).Elem()
		x := float64(i%7) - 3
		u := int64(i % 5)
		day2 := "2"
		v.Field(0).SetInt(id)
		v.Field(1).SetInt(int64(day))
		v.Field(2).SetFloat(float64(i % 2))
		v.Field(3).Set(reflect.ValueOf(&x))
		v.Field(4).Set(reflect.ValueOf(&u))
		v.Field(5).Set(reflect.ValueOf(&day2))
		return v.Interface()
	}
	key := checkpoint.Key{Pipeline: "test", Run: "rev", Node: "split"}
	out, _, err := checkpoint.Do(context.Background(), st, key, "f1", func(ctx context.Context, w *checkpoint.Writer) (split.Record, error) {
		pq := parquet.SchemaOf(reflect.New(typ).Interface())
		var ref checkpoint.Ref
		for _, name := range []string{split.TrainDataset, split.EvalDataset} {
			d, err := checkpoint.CreateRows(w, name, pq)
			if err != nil {
				return split.Record{}, err
			}
			rows := make([]any, n)
			for i := range rows {
				rows[i] = row(int64(n-i), 2, i)
			}
			if _, err := d.Write(rows); err != nil {
				return split.Record{}, err
			}
			if ref, err = d.Close(); err != nil {
				return split.Record{}, err
			}
		}
		return split.Record{
			URI: objects.KeyURI(st, ref.Manifest), Manifest: ref.Manifest, TrainRows: int64(n), EvalRows: int64(n), Schema: splittest.Schema,
			Window:     dataset.Window{Start: backfill.Day(1).String(), End: backfill.Day(2).String()},
			TrainDates: []string{backfill.Day(1).String()}, EvalDates: []string{backfill.Day(2).String()},
		}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.URI
}

// TestRequestOrder: the permutation sorts stably, as dataset.Load does.
func TestRequestOrder(t *testing.T) {
	if got := requestOrder([]int64{5, 3, 5, 1}); !slices.Equal(got, []int{3, 1, 0, 2}) {
		t.Errorf("order %v", got)
	}
}

// TestCommandErrors: what a broken evaluator program or a missing argv
// fails with.
func TestCommandErrors(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		name, script, errType string
		retryable             bool
		want                  []string
	}{
		{"no metrics", "#!/bin/sh\nexit 0\n", errtype.BadInput, false,
			[]string{"node ev:", "metrics.json", "RETRAIN_METRICS_OUT", "wrote no metrics file", "candidate s3://"}},
		{"not json", "#!/bin/sh\necho 'auc=1' > \"$RETRAIN_METRICS_OUT\"\n", errtype.BadInput, false,
			[]string{"node ev:", "not a JSON object"}},
		{"not an object", "#!/bin/sh\necho '[1]' > \"$RETRAIN_METRICS_OUT\"\n", errtype.BadInput, false,
			[]string{"not a JSON object"}},
		{"no overall", "#!/bin/sh\necho '{\"rows\": 1000}' > \"$RETRAIN_METRICS_OUT\"\n", errtype.BadInput, false,
			[]string{"node ev:", "no \"overall\""}},
		{"no rows", "#!/bin/sh\necho '{\"overall\": {\"auc\": 0.7}}' > \"$RETRAIN_METRICS_OUT\"\n", errtype.BadInput, false,
			[]string{"no \"rows\""}},
		{"wrong rows", "#!/bin/sh\necho '{\"rows\": 999, \"overall\": {\"auc\": 0.7}}' > \"$RETRAIN_METRICS_OUT\"\n", errtype.CheckFailed, false,
			[]string{"node ev:", "count 999 rows", "eval data has 1000 rows"}},
		{"exit 3", "#!/bin/sh\necho 'loading the model' >&2\necho 'CUDA out of memory' >&2\nexit 3\n", "", true,
			[]string{"exited with code 3", "CUDA out of memory", "candidate s3://"}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			script := f.script(t, "case"+string(rune('a'+i))+".sh", c.script)
			_, err := f.run(t, "ev", map[string]any{"candidate": f.other, "evaluator": "command", "argv": []any{script}})
			if err == nil {
				t.Fatal("no error")
			}
			var appErr *temporal.ApplicationError
			if !errors.As(err, &appErr) || appErr.NonRetryable() == c.retryable {
				t.Errorf("retryable: want %v: %v", c.retryable, err)
			}
			if c.errType != "" && nodetest.ErrType(err) != c.errType {
				t.Errorf("type %q, want %s: %v", nodetest.ErrType(err), c.errType, err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v: want %q in it", err, w)
				}
			}
		})
	}

	t.Run("wrong predictions", func(t *testing.T) {
		pre := filepath.Join(t.TempDir(), "pre.npy")
		if err := npy.WriteFile(pre, make([]float32, 10)); err != nil {
			t.Fatal(err)
		}
		script := f.script(t, "short.sh", "#!/bin/sh\ncp \"$PRE\" \"$RETRAIN_PREDICTIONS_OUT\"\necho '{\"overall\": {}}' > \"$RETRAIN_METRICS_OUT\"\n")
		_, err := f.run(t, "ev", map[string]any{"candidate": f.other, "evaluator": "command", "argv": []any{script}, "env": map[string]any{"PRE": pre}})
		if nodetest.ErrType(err) != errtype.CheckFailed || !strings.Contains(err.Error(), "hold 10 rows, but the eval data has 1000 rows") {
			t.Errorf("10 predictions: %v", err)
		}
	})
	t.Run("candidate without argv", func(t *testing.T) {
		_, err := f.run(t, "ev", map[string]any{"candidate": f.other})
		if nodetest.ErrType(err) != errtype.BadInput || !strings.Contains(err.Error(), "candidate "+f.other) ||
			!strings.Contains(err.Error(), "evaluator: command and argv") {
			t.Errorf("%v", err)
		}
	})
	t.Run("no such program", func(t *testing.T) {
		_, err := f.run(t, "ev", map[string]any{"candidate": f.other, "evaluator": "command", "argv": []any{filepath.Join(f.dir, "missing")}})
		if nodetest.ErrType(err) != errtype.BadInput || !strings.Contains(err.Error(), "start the evaluator") {
			t.Errorf("%v", err)
		}
	})
}
