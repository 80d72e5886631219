package train

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/activities/internal/objects"
	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/activities/split/splittest"
	"github.com/retrain-ml/retrain/nodetype"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/gpu"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
)

func TestBuiltinDivergenceIsPermanent(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	split := splittest.Write(t, st, "r2", 2000, 500)
	tr := &Trainers{Store: st, Logger: quiet}
	in := nodetype.Input{Pipeline: "test", RunID: "r2", Node: "train", Type: "train",
		With: map[string]any{"data": split, "learning_rate": 50, "max_emb_norm": 0.5, "buckets": 256}}
	_, err := nodetest.Run(t, tr.Run, in, nil)
	if nodetest.ErrType(err) != errtype.Diverged || !strings.Contains(err.Error(), "step") || !strings.Contains(err.Error(), "emb_max_norm") {
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
	split := splittest.Write(t, st, "r3", 500, 100)
	ctx := context.Background()
	read := func(t *testing.T, out map[string]any, name string) string {
		t.Helper()
		key, _ := objects.StoreKey(st, out["model_uri"].(string))
		b, err := objects.ReadObject(ctx, st, key+name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return string(b)
	}
	node := func(run string, extra map[string]any) nodetype.Input {
		w := map[string]any{"trainer": "command", "data": split, "argv": []any{"sh", "-c", trainerScript}}
		for k, v := range extra {
			w[k] = v
		}
		return nodetype.Input{Pipeline: "test", RunID: run, Node: "train", Type: "train", With: w}
	}

	t.Run("contract and GPUs", func(t *testing.T) {
		tr := &Trainers{Store: st, Logger: quiet, GPUs: gpu.NewAllocator(fakeGPUs{3}, gpu.ByUUID), Monitor: fakeGPUs{3}}
		out, err := nodetest.Run(t, tr.Run, node("c1", map[string]any{"gpus": 2}), nil)
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
		if d, _ := out["data"].(map[string]any); d == nil || d["bytes_read"] != d["split_bytes"] || d["shards"] != 1.0 || d["rows"] != 500.0 || d["disk_peak"].(float64) <= 0 {
			t.Errorf("data %v: want the whole split's one file read", out["data"])
		}
		if _, ok := out["examples"]; ok {
			t.Errorf("outputs %v: a command trainer does not count examples", out)
		}
		if g, ok := out["gpu"].(map[string]any); !ok || g["samples"].(float64) < 1 {
			t.Errorf("no GPU utilization summary: %v", out["gpu"])
		}
		if tr.GPUs.Leased() != 0 {
			t.Errorf("%d GPUs still leased", tr.GPUs.Leased())
		}
	})

	t.Run("a retry resumes from the last checkpoint", func(t *testing.T) {
		// The fake trainer's knobs come from the worker's environment,
		// which programs get only what --pass-env names of.
		tr := &Trainers{Store: st, Logger: quiet, Env: progenv.Policy{PassEnv: []string{"FAIL_AT"}}}
		t.Setenv("FAIL_AT", "5")
		_, err := nodetest.Run(t, tr.Run, node("c2", nil), nil)
		if err == nil || !strings.Contains(err.Error(), "crash at 5") {
			t.Fatalf("first attempt: %v", err)
		}
		// The heartbeat of the first attempt is lost (a worker died): the
		// record in the store is enough.
		t.Setenv("FAIL_AT", "")
		out, err := nodetest.Run(t, tr.Run, node("c2", nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(read(t, out, "started_at.txt")); got != "4" || out["resumed_from"].(float64) != 4 {
			t.Fatalf("resumed at %q, outputs %v (want step 4, not 0: ray#46814)", got, out)
		}
		var curve []CurvePoint
		key, _ := objects.StoreKey(st, out["loss_curve_uri"].(string))
		if err := objects.GetJSON(ctx, st, key, &curve); err != nil || len(curve) != 6 {
			t.Fatalf("curve %v, %v: want the steps of both attempts", curve, err)
		}
	})

	t.Run("divergence kills the trainer and fails for good", func(t *testing.T) {
		tr := &Trainers{Store: st, Logger: quiet, Env: progenv.Policy{PassEnv: []string{"NAN_AT"}}}
		t.Setenv("NAN_AT", "3")
		_, err := nodetest.Run(t, tr.Run, node("c3", nil), nil)
		if nodetest.ErrType(err) != errtype.Diverged || !strings.Contains(err.Error(), "step 3") {
			t.Fatalf("error %v", err)
		}
	})

	t.Run("GPUs on a worker without any", func(t *testing.T) {
		tr := &Trainers{Store: st, Logger: quiet}
		_, err := nodetest.Run(t, tr.Run, node("c4", map[string]any{"gpus": 1}), nil)
		if nodetest.ErrType(err) != errtype.NoGPUs {
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
		{map[string]any{"data": "x", "trainer": "command", "argv": []any{"t"}, "data_format": "csv"}, "csv"},
		{map[string]any{"data": "x", "trainer": "command", "argv": []any{"t"}, "processes": 0.0}, "processes"},
		{map[string]any{"data": "x", "trainer": "command", "argv": []any{"sh", "-c", "torchrun --nproc_per_node 2 t.py"}, "processes": 2.0}, "torchrun"},
		{map[string]any{"data": "x", "processes": 2.0}, "does not take processes"},
		{map[string]any{"data": "x", "hosts": 2.0}, "the builtin trainer is one process on one worker"},
		{map[string]any{"data": "x", "trainer": "command", "argv": []any{"torchrun", "t.py"}, "hosts": 2.0}, "hosts 2: argv runs torchrun"},
		{map[string]any{"data": "x", "trainer": "command", "argv": []any{"t"}, "hosts": 0.0}, "hosts must be at least 1"},
		{map[string]any{"data": "x", "trainer": "command", "argv": []any{"torchrun", "t.py"}, "shard_data": true}, "shard_data: argv runs torchrun"},
		{map[string]any{"data": "x", "shard_data": true}, "does not take shard_data"},
		{map[string]any{"data": "x", "trainer": "command", "argv": []any{"t"}, "gang_timeout": "0s"}, "gang_timeout 0s"},
		{map[string]any{"data": "x", "trainer": "command", "argv": []any{"t"}, "hang_timeout": "soon"}, "hang_timeout"},
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

// TestSchema: the train node's `with` fields, defaults and docs come from
// With, its outputs from Outputs, and the fields only one trainer takes
// from the trainer tags.
func TestSchema(t *testing.T) {
	typ := Type(Deps{})
	if err := typ.Validate(); err != nil {
		t.Fatal(err)
	}
	nt := typ.NodeType
	if nt.Name != "train" || TrainType.Name != "train" || nt.Check == nil {
		t.Fatalf("node type %+v", nt)
	}
	only := map[string]string{}
	for _, f := range builtinOnly {
		only[f] = BuiltinTrainer
	}
	for _, f := range commandOnly {
		only[f] = CommandTrainer
	}
	fields := map[string]dags.Field{}
	for _, f := range nt.Fields {
		if f.Doc == "" {
			t.Errorf("field %s has no doc", f.Name)
		}
		if f.Default != "" && strings.Contains(f.Doc, "default "+f.Default) {
			t.Errorf("field %s: the doc repeats the default: %q", f.Name, f.Doc)
		}
		// A field only one trainer takes says so first.
		if kind := only[f.Name]; kind != "" && !strings.HasPrefix(f.Doc, kind+": ") {
			t.Errorf("field %s is for trainer %s only, but its doc is %q", f.Name, kind, f.Doc)
		}
		fields[f.Name] = f
	}
	for _, want := range []dags.Field{
		{Name: "data", Type: dags.FieldString, Required: true},
		{Name: "trainer", Type: dags.FieldString, Default: "builtin"},
		{Name: "max_emb_norm", Type: dags.FieldNumber, Default: "100"},
		{Name: "dense", Type: dags.FieldStringList},
		{Name: "sparse", Type: dags.FieldStringList},
		{Name: "transforms", Type: dags.FieldStringMap},
		{Name: "dim", Type: dags.FieldInt, Default: "8"},
		{Name: "buckets", Type: dags.FieldInt, Default: "262144"},
		{Name: "epochs", Type: dags.FieldInt, Default: "2"},
		{Name: "steps", Type: dags.FieldInt},
		{Name: "batch_size", Type: dags.FieldInt, Default: "1024"},
		{Name: "learning_rate", Type: dags.FieldNumber, Default: "0.05"},
		{Name: "l2", Type: dags.FieldNumber, Default: "0.001"},
		{Name: "seed", Type: dags.FieldInt, Default: "1"},
		{Name: "workers", Type: dags.FieldInt},
		{Name: "checkpoint_every", Type: dags.FieldInt, Default: "50"},
		{Name: "argv", Type: dags.FieldStringList},
		{Name: "env", Type: dags.FieldStringMap},
		{Name: "dir", Type: dags.FieldString},
		{Name: "gpus", Type: dags.FieldInt},
		{Name: "processes", Type: dags.FieldInt},
		{Name: "data_format", Type: dags.FieldString, Default: "parquet"},
		{Name: "hosts", Type: dags.FieldInt},
		{Name: "gang_timeout", Type: dags.FieldDuration, Default: "10m"},
		{Name: "hang_timeout", Type: dags.FieldDuration, Default: "10m"},
		{Name: "shard_data", Type: dags.FieldBool},
		{Name: "stream_data", Type: dags.FieldBool},
		{Name: "stream_window", Type: dags.FieldInt},
	} {
		got := fields[want.Name]
		got.Doc = ""
		if !reflect.DeepEqual(got, want) {
			t.Errorf("field %s: %+v, want %+v", want.Name, got, want)
		}
	}
	if len(fields) != 28 {
		t.Errorf("%d fields, want 28", len(fields))
	}
	if got := strings.Join(commandOnly, " "); got != "argv env dir gpus processes data_format hosts gang_timeout shard_data stream_data stream_window hang_timeout" {
		t.Errorf("command-only fields %s", got)
	}
	if got := strings.Join(builtinOnly, " "); got != "dense sparse transforms dim buckets epochs steps batch_size learning_rate l2 seed workers checkpoint_every" {
		t.Errorf("builtin-only fields %s", got)
	}
	wantOut := "trainer model_uri steps resumed_from examples loss loss_curve_uri checkpoint train_rows gpus gpu hosts slowest_host restarts attempts data summary"
	if got := strings.Join(nt.Outputs, " "); got != wantOut {
		t.Errorf("outputs %s, want %s", got, wantOut)
	}
}

// TestDefaults: an absent key takes its default, and an explicit zero
// stays zero (dim: 0 is logistic regression, max_emb_norm: 0 checks only
// NaN/Inf, l2: 0 turns regularization off).
func TestDefaults(t *testing.T) {
	w, err := nodetype.DecodeWith[With](map[string]any{"data": "x"})
	if err != nil {
		t.Fatal(err)
	}
	want := With{Data: "x", Trainer: BuiltinTrainer, MaxEmbNorm: 100, Dim: 8, Buckets: 1 << 18, Epochs: 2,
		BatchSize: 1024, LearningRate: 0.05, L2: 1e-3, Seed: 1, CheckpointEvery: 50, DataFormat: "parquet", GangTimeout: "10m", HangTimeout: "10m"}
	if !reflect.DeepEqual(w, want) {
		t.Errorf("defaults %+v, want %+v", w, want)
	}
	w, err = nodetype.DecodeWith[With](map[string]any{"data": "x", "dim": 0, "max_emb_norm": 0, "l2": 0})
	if err != nil || w.Dim != 0 || w.MaxEmbNorm != 0 || w.L2 != 0 {
		t.Errorf("explicit zeros: %+v, %v", w, err)
	}
}

// TestBuiltinDefaultsRun: a block with only data trains with the defaults:
// 2 epochs of 1024-row batches.
func TestBuiltinDefaultsRun(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	split := splittest.Write(t, st, "r4", 2000, 500)
	tr := &Trainers{Store: st, Logger: quiet}
	in := nodetype.Input{Pipeline: "test", RunID: "r4", Node: "train", Type: "train", With: map[string]any{"data": split}}
	out, err := nodetest.Run(t, tr.Run, in, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out["trainer"] != BuiltinTrainer || out["steps"] != 4.0 || out["examples"] != 4000.0 || out["gpus"] != 0.0 || out["train_rows"] != 2000.0 {
		t.Errorf("outputs %v: want 4 steps over 4000 examples", out)
	}
	if _, ok := out["gpu"]; ok {
		t.Errorf("outputs %v: a builtin trainer has no gpu summary", out)
	}
}

var quiet = nodetest.Quiet

// TestBuiltinSeedZeroIsItsOwn: seed 0 trains a model of its own, not seed
// 1's (a sweep over seeds 0..9 gets ten models), and the same seed trains
// the same model again.
func TestBuiltinSeedZeroIsItsOwn(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	split := splittest.Write(t, st, "seeds", 2000, 500)
	tr := &Trainers{Store: st, Logger: quiet}
	loss := func(run string, seed int) float64 {
		in := nodetype.Input{Pipeline: "test", RunID: run, Node: "train", Type: "train",
			With: map[string]any{"data": split, "seed": seed, "buckets": 256, "epochs": 1}}
		out, err := nodetest.Run(t, tr.Run, in, nil)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		// The total its heartbeats announce is the step it ended at.
		if want := totalSteps(int64(out["train_rows"].(float64)), 1, 1024, 0); int64(out["steps"].(float64)) != want {
			t.Errorf("trained %v steps; totalSteps says %d", out["steps"], want)
		}
		return out["loss"].(float64)
	}
	zero, one, zeroAgain := loss("s0", 0), loss("s1", 1), loss("s0b", 0)
	if zero == one {
		t.Errorf("seed 0 trained seed 1's model (loss %v)", zero)
	}
	if zero != zeroAgain {
		t.Errorf("seed 0 twice: loss %v then %v", zero, zeroAgain)
	}
}

func TestTotalSteps(t *testing.T) {
	for _, c := range []struct {
		rows, epochs int64
		batch        int
		steps, want  int64
	}{
		{22500, 2, 1024, 0, 44}, // the demo: a batch may span two epochs
		{21429, 2, 1024, 0, 42},
		{1000, 1, 1024, 0, 1},
		{100000, 3, 1000, 50, 50},
		{0, 2, 1024, 0, 0},
	} {
		if got := totalSteps(c.rows, c.epochs, c.batch, c.steps); got != c.want {
			t.Errorf("totalSteps(%d, %d, %d, %d) = %d, want %d", c.rows, c.epochs, c.batch, c.steps, got, c.want)
		}
	}
}
