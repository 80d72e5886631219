package activities

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/gpu"
	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/dataset"
	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/internal/s3test"
)

// splitSchema is the layout of the test splits: one dense feature and a
// user id, labels drawn from sigmoid(2x + user effect).
var splitSchema = dataset.Schema{
	Label: "label", Date: "date", RequestID: "request_id", Slice: "date",
	Columns: []dataset.Column{{Name: "x", Kind: dataset.Dense}, {Name: "user_id", Kind: dataset.ID}},
}

// writeSplit stores a split checkpoint the way a split node does and
// returns its URI.
func writeSplit(t *testing.T, st *s3store.Store, run string, trainRows, evalRows int) string {
	t.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	users := make([]float64, 50)
	for i := range users {
		users[i] = r.NormFloat64()
	}
	typ := splitSchema.RowType()
	row := func(id int64, day int32) any {
		v := reflect.New(typ).Elem()
		x := r.NormFloat64()
		u := int64(r.IntN(len(users)))
		var y float32
		if r.Float64() < 1/(1+math.Exp(-(2*x+users[u]-1))) {
			y = 1
		}
		day2 := fmt.Sprint(day)
		v.Field(0).SetInt(id)
		v.Field(1).SetInt(int64(day))
		v.Field(2).SetFloat(float64(y))
		v.Field(3).Set(reflect.ValueOf(&x))
		v.Field(4).Set(reflect.ValueOf(&u))
		v.Field(5).Set(reflect.ValueOf(&day2))
		return v.Interface()
	}
	key := checkpoint.Key{Pipeline: "test", Run: run, Node: "split"}
	out, _, err := checkpoint.Do(context.Background(), st, key, "f1", func(ctx context.Context, w *checkpoint.Writer) (splitOutputs, error) {
		pq := parquet.SchemaOf(reflect.New(typ).Interface())
		var ref checkpoint.Ref
		for _, ds := range []struct {
			name string
			n    int
			day  int32
		}{{TrainDataset, trainRows, 1}, {EvalDataset, evalRows, 2}} {
			d, err := checkpoint.CreateRows(w, ds.name, pq)
			if err != nil {
				return splitOutputs{}, err
			}
			rows := make([]any, ds.n)
			for i := range rows {
				rows[i] = row(int64(ds.day)<<32|int64(i), ds.day)
			}
			if _, err := d.Write(rows); err != nil {
				return splitOutputs{}, err
			}
			if ref, err = d.Close(); err != nil {
				return splitOutputs{}, err
			}
		}
		return splitOutputs{
			URI: keyURI(st, ref.Manifest), Manifest: ref.Manifest, TrainRows: int64(trainRows), EvalRows: int64(evalRows), Schema: splitSchema,
			Window:     dataset.Window{Start: backfill.Day(1).String(), End: backfill.Day(2).String()},
			TrainDates: []string{backfill.Day(1).String()}, EvalDates: []string{backfill.Day(2).String()},
		}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.URI
}

// runNode runs a node function as a Temporal activity, with heartbeat
// details of an earlier attempt when given.
func runNode(t *testing.T, fn NodeFunc, in NodeInput, heartbeat any) (map[string]any, error) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivityWithOptions(Activity(fn), activity.RegisterOptions{Name: in.Type})
	if heartbeat != nil {
		env.SetHeartbeatDetails(heartbeat)
	}
	v, err := env.ExecuteActivity(in.Type, in)
	if err != nil {
		return nil, err
	}
	var res NodeResult
	if err := v.Get(&res); err != nil {
		return nil, err
	}
	return res.Outputs, nil
}

func errorType(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Type()
	}
	return ""
}

func TestBuiltinTrainEvaluateAndResume(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	split := writeSplit(t, st, "r1", 6000, 2000)
	tr := &Trainers{Store: st, Logger: quiet}
	with := map[string]any{"data": split, "epochs": 3, "batch_size": 256, "checkpoint_every": 10, "dim": 4, "buckets": 1024}
	in := NodeInput{Pipeline: "test", RunID: "r1", Node: "train", Type: "train", With: with}
	out, err := runNode(t, tr.Run, in, nil)
	if err != nil {
		t.Fatal(err)
	}
	steps := out["steps"].(float64)
	if out["resumed_from"].(float64) != 0 || steps != 71 || out["train_rows"].(float64) != 6000 {
		t.Fatalf("outputs %v", out)
	}
	var curve []CurvePoint
	key, _ := storeKey(st, out["loss_curve_uri"].(string))
	if err := getJSON(context.Background(), st, key, &curve); err != nil || len(curve) != int(steps) {
		t.Fatalf("curve: %d points, %v", len(curve), err)
	}

	// A retry of the finished node resumes from its last checkpoint: no
	// step is trained again and the model is the same.
	again, err := runNode(t, tr.Run, in, TrainProgress{Step: 71})
	if err != nil {
		t.Fatal(err)
	}
	if again["resumed_from"].(float64) != steps || again["steps"].(float64) != steps || again["model_uri"] != out["model_uri"] {
		t.Fatalf("retry: %v", again)
	}
	if err := getJSON(context.Background(), st, key, &curve); err != nil || len(curve) != int(steps) {
		t.Fatalf("curve after the retry: %d points, %v", len(curve), err)
	}

	// Evaluate with no production model, then against one.
	ev := &Evaluator{Store: st, Logger: quiet}
	evIn := NodeInput{Pipeline: "test", RunID: "r1", Node: "evaluate", Type: "evaluate",
		With: map[string]any{"candidate": out["model_uri"], "data": split, "model": "ctr", "slices": true}}
	res, err := runNode(t, ev.Run, evIn, nil)
	if err != nil {
		t.Fatal(err)
	}
	auc, _ := res["auc"].(float64)
	if res["has_baseline"] != false || auc < 0.75 || res["rows"].(float64) != 2000 {
		t.Fatalf("evaluate: %v", res)
	}
	dir := t.TempDir()
	modelKey, _ := storeKey(st, out["model_uri"].(string))
	if err := downloadFile(context.Background(), st, modelKey+ModelFile, filepath.Join(dir, ModelFile)); err != nil {
		t.Fatal(err)
	}
	reg := models.New(st)
	arts, _ := models.DirArtifacts(dir)
	v, err := reg.Register(context.Background(), "ctr", arts, "", models.Meta{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Promote(context.Background(), "ctr", "production", v.Version, models.Actor{Name: "test"}, "first"); err != nil {
		t.Fatal(err)
	}
	res, err = runNode(t, ev.Run, evIn, nil)
	if err != nil {
		t.Fatal(err)
	}
	evaluation := res["evaluation"].(map[string]any)
	if res["baseline_version"] != "v1" || evaluation["baseline"].(map[string]any)["auc"] != auc {
		t.Fatalf("against production: %v", res)
	}
	var report EvaluationReport
	mk, _ := storeKey(st, res["metrics_uri"].(string))
	if err := getJSON(context.Background(), st, mk, &report); err != nil || report.Baseline == nil || len(report.Candidate.Slices) != 1 {
		t.Fatalf("metrics file %+v: %v", report, err)
	}
	// The gate decides from that evaluation.
	d := DecideGate(map[string]any{"evaluation": evaluation,
		"metrics": map[string]any{"auc": map[string]any{"direction": "higher_is_better", "absolute": 0}}})
	if d.Error != "" || !d.Result.Passed || d.Result.BaselineVersion != "v1" {
		t.Fatalf("gate: %+v", d)
	}
}

func TestBuiltinDivergenceIsPermanent(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	split := writeSplit(t, st, "r2", 2000, 500)
	tr := &Trainers{Store: st, Logger: quiet}
	in := NodeInput{Pipeline: "test", RunID: "r2", Node: "train", Type: "train",
		With: map[string]any{"data": split, "learning_rate": 50, "max_emb_norm": 0.5, "buckets": 256}}
	_, err := runNode(t, tr.Run, in, nil)
	if errorType(err) != errtype.Diverged || !strings.Contains(err.Error(), "step") || !strings.Contains(err.Error(), "emb_max_norm") {
		t.Fatalf("error %v, want a %s naming the step and the figure", err, errtype.Diverged)
	}
}

// trainerScript is a command trainer in sh: it records its environment,
// prints progress lines with a checkpoint every 2 steps (a file in
// RETRAIN_CHECKPOINT_URI holding the step), resumes from
// RETRAIN_RESUME_FROM, and writes a model. FAIL_AT makes it exit 1 at that
// step; NAN_AT prints a NaN loss there.
const trainerScript = `
set -e
env | grep -E '^(RETRAIN_|CUDA_VISIBLE_DEVICES)' | sort > "$RETRAIN_MODEL_OUT/env.txt"
ls "$RETRAIN_TRAIN_DATA" > "$RETRAIN_MODEL_OUT/train_files.txt"
start=0
if [ -n "$RETRAIN_RESUME_FROM" ]; then start=$(cat "$RETRAIN_RESUME_FROM"); echo "resuming at $start"; fi
echo "$start" > "$RETRAIN_MODEL_OUT/started_at.txt"
i=$start
while [ $i -lt 6 ]; do
  i=$((i+1))
  if [ "$i" = "${FAIL_AT:-0}" ]; then echo "crash at $i" >&2; exit 1; fi
  if [ "$i" = "${NAN_AT:-0}" ]; then echo "{\"step\": $i, \"loss\": NaN}"; sleep 5; fi
  if [ $((i % 2)) = 0 ]; then
    echo $i > "$RETRAIN_CHECKPOINT_URI/ckpt-$i"
    echo "{\"step\": $i, \"loss\": 0.$((9-i)), \"emb_max_norm\": 1.5, \"checkpoint\": \"$RETRAIN_CHECKPOINT_URI/ckpt-$i\"}"
  else
    echo "{\"step\": $i, \"loss\": 0.$((9-i))}"
  fi
done
echo weights > "$RETRAIN_MODEL_OUT/model.txt"
`

// fakeGPUs is a host with healthy GPUs for the allocator.
type fakeGPUs struct{ n int }

func (f fakeGPUs) Health() ([]gpu.Health, error) {
	hs := make([]gpu.Health, f.n)
	for i := range hs {
		hs[i] = gpu.Health{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Healthy: true}
	}
	return hs, nil
}

func (f fakeGPUs) Utilization(string) (gpu.Utilization, error) {
	return gpu.Utilization{GPU: 80}, nil
}

func TestCommandTrainer(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	split := writeSplit(t, st, "r3", 500, 100)
	ctx := context.Background()
	read := func(t *testing.T, out map[string]any, name string) string {
		t.Helper()
		key, _ := storeKey(st, out["model_uri"].(string))
		b, err := readObject(ctx, st, key+name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return string(b)
	}
	node := func(run string, extra map[string]any) NodeInput {
		w := map[string]any{"trainer": "command", "data": split, "argv": []any{"sh", "-c", trainerScript}}
		for k, v := range extra {
			w[k] = v
		}
		return NodeInput{Pipeline: "test", RunID: run, Node: "train", Type: "train", With: w}
	}

	t.Run("contract and GPUs", func(t *testing.T) {
		tr := &Trainers{Store: st, Logger: quiet, GPUs: gpu.NewAllocator(fakeGPUs{3}, gpu.ByUUID), Monitor: fakeGPUs{3}}
		out, err := runNode(t, tr.Run, node("c1", map[string]any{"gpus": 2}), nil)
		if err != nil {
			t.Fatal(err)
		}
		if out["steps"].(float64) != 6 || out["resumed_from"].(float64) != 0 || out["loss"].(float64) != 0.3 || out["gpus"].(float64) != 2 {
			t.Fatalf("outputs %v", out)
		}
		env := read(t, out, "env.txt")
		for _, want := range []string{"CUDA_VISIBLE_DEVICES=GPU-0,GPU-1", "RETRAIN_GPUS=2", "RETRAIN_TRAIN_DATA=", "RETRAIN_EVAL_DATA=",
			"RETRAIN_CHECKPOINT_URI=", "RETRAIN_MODEL_OUT=", "RETRAIN_RUN_ID=c1"} {
			if !strings.Contains(env, want) {
				t.Errorf("environment lacks %s:\n%s", want, env)
			}
		}
		if strings.Contains(env, "RETRAIN_RESUME_FROM") {
			t.Errorf("a first attempt resumes:\n%s", env)
		}
		if files := read(t, out, "train_files.txt"); !strings.Contains(files, ".parquet") {
			t.Errorf("train data: %q", files)
		}
		if g, ok := out["gpu"].(map[string]any); !ok || g["samples"].(float64) < 1 {
			t.Errorf("no GPU utilization summary: %v", out["gpu"])
		}
		if tr.GPUs.Leased() != 0 {
			t.Errorf("%d GPUs still leased", tr.GPUs.Leased())
		}
	})

	t.Run("a retry resumes from the last checkpoint", func(t *testing.T) {
		tr := &Trainers{Store: st, Logger: quiet}
		t.Setenv("FAIL_AT", "5")
		_, err := runNode(t, tr.Run, node("c2", nil), nil)
		if err == nil || !strings.Contains(err.Error(), "crash at 5") {
			t.Fatalf("first attempt: %v", err)
		}
		// The heartbeat of the first attempt is lost (a worker died): the
		// record in the store is enough.
		t.Setenv("FAIL_AT", "")
		out, err := runNode(t, tr.Run, node("c2", nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(read(t, out, "started_at.txt")); got != "4" || out["resumed_from"].(float64) != 4 {
			t.Fatalf("resumed at %q, outputs %v (want step 4, not 0: ray#46814)", got, out)
		}
		var curve []CurvePoint
		key, _ := storeKey(st, out["loss_curve_uri"].(string))
		if err := getJSON(ctx, st, key, &curve); err != nil || len(curve) != 6 {
			t.Fatalf("curve %v, %v: want the steps of both attempts", curve, err)
		}
	})

	t.Run("divergence kills the trainer and fails for good", func(t *testing.T) {
		tr := &Trainers{Store: st, Logger: quiet}
		t.Setenv("NAN_AT", "3")
		_, err := runNode(t, tr.Run, node("c3", nil), nil)
		if errorType(err) != errtype.Diverged || !strings.Contains(err.Error(), "step 3") {
			t.Fatalf("error %v", err)
		}
	})

	t.Run("GPUs on a worker without any", func(t *testing.T) {
		tr := &Trainers{Store: st, Logger: quiet}
		_, err := runNode(t, tr.Run, node("c4", map[string]any{"gpus": 1}), nil)
		if errorType(err) != errtype.NoGPUs {
			t.Fatalf("error %v", err)
		}
	})
}

func TestTrainSpecChecks(t *testing.T) {
	tests := []struct {
		with map[string]any
		want string
	}{
		{map[string]any{"data": "x", "trainer": "command"}, "argv"},
		{map[string]any{"data": "x", "gpus": 1}, "does not take gpus"},
		{map[string]any{"data": "x", "trainer": "command", "argv": []any{"t"}, "epochs": 2}, "does not take epochs"},
		{map[string]any{"data": "x", "transforms": map[string]any{"a": "sqrt"}}, "sqrt"},
		{map[string]any{"data": "x", "trainer": "keras"}, "keras"},
		{map[string]any{"data": "x", "batch_size": 0.0}, "batch_size"},
	}
	for _, tt := range tests {
		if err := checkTrain(tt.with); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want one about %q", tt.with, err, tt.want)
		}
	}
	if err := checkTrain(map[string]any{"data": "x", "trainer": "command", "argv": []any{"torchrun"}, "gpus": 2.0}); err != nil {
		t.Error(err)
	}
}
