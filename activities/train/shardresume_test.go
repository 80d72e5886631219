package train

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/activities/split/splittest"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/shard"
	"github.com/retrain-ml/retrain/nodetype"
)

// resumeScript is a command trainer rank in sh. A first attempt keeps a
// copy of its share in $OUT, and rank 0 writes a checkpoint whose line
// says each rank trained the first $DONE rows of its share of epoch 0;
// then every rank fails, as if a host had been killed. A resumed attempt
// keeps its share of the rest and its env, named by $OUT/stage; while
// that file is there, rank 0 also writes a checkpoint in the rest ($DONE2
// rows of each rank's rest share) and every rank fails again.
const resumeScript = `
set -e
r=${RANK:-0}
if [ -z "$RETRAIN_RESUME_FROM" ]; then
  cp -r "$RETRAIN_TRAIN_DATA" "$OUT/first-$r"
  if [ "$r" = 0 ]; then
    echo state > "$RETRAIN_CHECKPOINT_URI/step-7.ckpt"
    echo "{\"step\": 7, \"checkpoint\": \"$RETRAIN_CHECKPOINT_URI/step-7.ckpt\", \"shard_epoch\": 0, \"shard_done\": $DONE}"
  fi
  sleep 0.5
  exit 3
fi
stage=final
if [ -f "$OUT/stage" ]; then stage=$(cat "$OUT/stage"); fi
env | grep -E '^RETRAIN_(SHARD_|GLOBAL_|RESUME)' | sort > "$OUT/env-$stage-$r.txt"
if [ -n "$RETRAIN_SHARD_REST_DATA" ]; then cp -r "$RETRAIN_SHARD_REST_DATA" "$OUT/rest-$stage-$r"; fi
if [ "$stage" != final ]; then
  if [ "$r" = 0 ]; then
    echo state > "$RETRAIN_CHECKPOINT_URI/step-9.ckpt"
    echo "{\"step\": 9, \"checkpoint\": \"$RETRAIN_CHECKPOINT_URI/step-9.ckpt\", \"shard_epoch\": 0, \"shard_done\": $DONE2}"
  fi
  sleep 0.5
  exit 3
fi
echo '{"step": 10, "loss": 0.5}'
if [ "$r" = 0 ]; then echo weights > "$RETRAIN_MODEL_OUT/model.txt"; fi
`

// TestShardResumeWithAnotherWorld: a node with shard_data on 2 ranks
// fails after a checkpoint at which rank 0 had trained 137 rows of its
// share and rank 1 260. The run started again under its id on 3 ranks
// resumes from that checkpoint (the layout is not in the checkpoint's
// folder name) with the rest of epoch 0 to train first, and fails again
// after a checkpoint within the rest (20, 30 and 40 rows of the ranks'
// rest shares). Again on 3 ranks, it gets the same rest shares and how
// far each had gone; again on 2 ranks, the rest of the rest. The rows
// trained before each checkpoint and the last rest shares are every row
// of the epoch once. In npy and in Parquet (whose files a trainer reads
// in name order).
func TestShardResumeWithAnotherWorld(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	t.Setenv("TMPDIR", t.TempDir())
	const rows = 1000
	data := splittest.WriteFiles(t, st, "sr", rows, 50, 90)
	done1, done2 := []int64{137, 260}, []int64{20, 30, 40}
	for _, format := range []string{"npy", "parquet"} {
		t.Run(format, func(t *testing.T) {
			out := t.TempDir()
			tr := &Trainers{Store: st, Logger: quiet}
			attempt := func(processes int, stage string) (map[string]any, error) {
				t.Helper()
				if stage == "" {
					_ = os.Remove(filepath.Join(out, "stage"))
				} else if err := os.WriteFile(filepath.Join(out, "stage"), []byte(stage), 0o644); err != nil {
					t.Fatal(err)
				}
				return nodetest.Run(t, tr.Run, nodetype.Input{Pipeline: "test", RunID: "sr-" + format, Node: "train", Type: "train", With: map[string]any{
					"trainer": "command", "data": data, "argv": []any{"sh", "-c", resumeScript},
					"processes": processes, "shard_data": true, "data_format": format,
					"env": map[string]any{"OUT": out, "DONE": "[137, 260]", "DONE2": "[20, 30, 40]"},
				}}, nil)
			}
			ids := func(name string, r int) []int64 { return requestIDs(t, filepath.Join(out, name+"-"+strconv.Itoa(r))) }
			env := func(stage string, r int) string {
				b, _ := os.ReadFile(filepath.Join(out, "env-"+stage+"-"+strconv.Itoa(r)+".txt"))
				return string(b)
			}
			for _, a := range []struct {
				processes int
				stage     string
			}{{2, ""}, {3, "2"}, {3, "3"}} {
				if _, err := attempt(a.processes, a.stage); err == nil || !strings.Contains(err.Error(), "code 3") {
					t.Fatalf("attempt of stage %q: %v, want the ranks' exit 3", a.stage, err)
				}
			}
			res, err := attempt(2, "")
			if err != nil {
				t.Fatal(err)
			}
			if res["resumed_from"] != float64(9) {
				t.Fatalf("resumed_from %v, want 9", res["resumed_from"])
			}
			seen := map[int64]int{}
			train := func(ids []int64) {
				for _, id := range ids {
					seen[id]++
				}
			}
			var rest2 int64
			for r := range 2 {
				train(ids("first", r)[:done1[r]])
			}
			for r := range 3 {
				second := ids("rest-2", r)
				rest2 += int64(len(second))
				train(second[:done2[r]])
				for _, want := range []string{"RETRAIN_SHARD_COUNT=3", "RETRAIN_SHARD_REST_EPOCH=0", "RETRAIN_SHARD_REST_DONE=0",
					fmt.Sprintf("RETRAIN_SHARD_REST_GLOBAL_ROWS=%d", rows-137-260), fmt.Sprintf("RETRAIN_SHARD_REST_ROWS=%d", len(second))} {
					if !strings.Contains(env("2", r), want+"\n") {
						t.Errorf("stage 2, rank %d's env lacks %s:\n%s", r, want, env("2", r))
					}
				}
				// The same world size again: the same rest shares, and
				// each rank's place in its own.
				if third := ids("rest-3", r); !slices.Equal(third, second) {
					t.Errorf("rank %d: the rest share of 3 ranks again differs: %d rows, were %d", r, len(third), len(second))
				}
				if want := fmt.Sprintf("RETRAIN_SHARD_REST_DONE=%d\n", done2[r]); !strings.Contains(env("3", r), want) {
					t.Errorf("stage 3, rank %d's env lacks %s", r, want)
				}
			}
			var last int64
			for r := range 2 {
				final := ids("rest-final", r)
				last += int64(len(final))
				train(final)
				if want := fmt.Sprintf("RETRAIN_SHARD_REST_GLOBAL_ROWS=%d\n", rows-137-260-90); !strings.Contains(env("final", r), want) {
					t.Errorf("the last stage, rank %d's env lacks %s:\n%s", r, want, env("final", r))
				}
			}
			t.Logf("%s: 2 ranks trained %d rows; 3 ranks were given the rest, %d rows, and trained 90; 2 ranks were given the rest of that, %d rows",
				format, 137+260, rest2, last)
			for i := range int64(rows) {
				if n := seen[1<<32|i]; n != 1 {
					t.Fatalf("row %d trained %d times in epoch 0", i, n)
				}
			}
			if d, _ := res["data"].(map[string]any); d["rest_rows"] != float64(last) {
				t.Errorf("outputs data %v: want rest_rows %d", d, last)
			}
		})
	}
}

// TestShardPosition: a checkpoint line's shard_done, one figure for
// every rank or one per rank, is where the checkpoint stands; another
// number of ranks is no position.
func TestShardPosition(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	sd, err := split.Open(context.Background(), st, splittest.WriteFiles(t, st, "sp", 100, 10, 10))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := planShards(sd, 3, []int{0}, "p", nil)
	if err != nil {
		t.Fatal(err)
	}
	got := plan.position(2, []int64{5})
	if got == nil || got.Epoch != 2 || len(got.Stages) != 1 || fmt.Sprint(got.Stages[0]) != "{3 [5 5 5]}" {
		t.Errorf("one figure: %+v", got)
	}
	if got := plan.position(2, []int64{1, 2}); got != nil {
		t.Errorf("2 figures for 3 ranks: %+v, want none", got)
	}
	// A position of another world size gives a rest; one that does not
	// fit the split fails with ErrPosition.
	plan, err = planShards(sd, 2, []int{0, 1}, "p", &shard.Position{Epoch: 1, Stages: []shard.Stage{{World: 3, Done: []int64{10, 10, 10}}}})
	if err != nil || plan.resumed.Rest == nil || plan.resumed.Rest.GlobalRows != 70 || len(plan.rest) != 2 {
		t.Fatalf("plan %+v, %v: want a rest of 70 rows", plan, err)
	}
	if got := plan.position(1, []int64{4, 6}); got == nil || len(got.Stages) != 2 || got.Stages[1].World != 2 {
		t.Errorf("a position in the rest: %+v, want the stage before and this one", got)
	}
	if got := plan.position(2, []int64{4, 6}); got == nil || len(got.Stages) != 1 {
		t.Errorf("a position in the next epoch: %+v, want one stage", got)
	}
	if _, err := planShards(sd, 2, []int{0}, "p", &shard.Position{Stages: []shard.Stage{{World: 3, Done: []int64{1}}}}); err == nil {
		t.Error("a position with 1 rank's progress for 3: no error")
	}
}

// TestFingerprintLeavesLayoutOut: with shard_data, the checkpoint folder
// of a node is the same whatever its hosts, processes and GPUs; without,
// they count (folders recorded before stay where they are).
func TestFingerprintLeavesLayoutOut(t *testing.T) {
	tr := &Trainers{Store: s3test.Start(t).Open(t, ""), Logger: quiet}
	prefix := func(shardData bool, processes int) string {
		with := map[string]any{"trainer": "command", "data": "s3://b/split/", "argv": []any{"sh", "-c", "true"}, "processes": processes, "shard_data": shardData}
		r, _, err := tr.newRun(nodetype.Input{Pipeline: "p", RunID: "r", Node: "train", Type: "train", With: with})
		if err != nil {
			t.Fatal(err)
		}
		return r.prefix
	}
	if prefix(true, 2) != prefix(true, 3) {
		t.Error("shard_data: the checkpoint folder depends on processes")
	}
	if prefix(false, 2) == prefix(false, 3) {
		t.Error("without shard_data: the checkpoint folder no longer depends on processes")
	}
}
