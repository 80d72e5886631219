package train

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
// says each rank trained the first $DONE rows of its share (a list, one
// figure per rank) of epoch 0; then every rank fails, as if a host had
// been killed. A resumed attempt keeps its share of the rest and its env.
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
env | grep -E '^RETRAIN_(SHARD_|GLOBAL_|RESUME)' | sort > "$OUT/env2-$r.txt"
if [ -n "$RETRAIN_SHARD_REST_DATA" ]; then cp -r "$RETRAIN_SHARD_REST_DATA" "$OUT/rest-$r"; fi
echo '{"step": 8, "loss": 0.5}'
if [ "$r" = 0 ]; then echo weights > "$RETRAIN_MODEL_OUT/model.txt"; fi
`

// TestShardResumeWithAnotherWorld: a node with shard_data on 2 ranks
// fails after a checkpoint at which rank 0 had trained 137 rows of its
// share and rank 1 260; the run started again under its id on 3 ranks
// resumes from that checkpoint (the layout is not in the checkpoint's
// folder name), and its ranks' shares of the rest of epoch 0 are the
// epoch's other rows: with the rows trained before, every row once. In
// npy and in Parquet (whose files a trainer reads in name order).
func TestShardResumeWithAnotherWorld(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	t.Setenv("TMPDIR", t.TempDir())
	const rows = 1000
	data := splittest.WriteFiles(t, st, "sr", rows, 50, 90)
	done := []int64{137, 260}
	for _, format := range []string{"npy", "parquet"} {
		t.Run(format, func(t *testing.T) {
			out := t.TempDir()
			tr := &Trainers{Store: st, Logger: quiet}
			in := func(processes int) nodetype.Input {
				return nodetype.Input{Pipeline: "test", RunID: "sr-" + format, Node: "train", Type: "train", With: map[string]any{
					"trainer": "command", "data": data, "argv": []any{"sh", "-c", resumeScript},
					"processes": processes, "shard_data": true, "data_format": format,
					"env": map[string]any{"OUT": out, "DONE": "[137, 260]"},
				}}
			}
			if _, err := nodetest.Run(t, tr.Run, in(2), nil); err == nil || !strings.Contains(err.Error(), "code 3") {
				t.Fatalf("first attempt: %v, want the ranks' exit 3", err)
			}
			res, err := nodetest.Run(t, tr.Run, in(3), nil)
			if err != nil {
				t.Fatal(err)
			}
			if res["resumed_from"] != float64(7) {
				t.Fatalf("resumed_from %v, want 7", res["resumed_from"])
			}
			seen := map[int64]int{}
			var trained int64
			for r := range 2 {
				ids := requestIDs(t, filepath.Join(out, "first-"+strconv.Itoa(r)))
				for _, id := range ids[:done[r]] {
					seen[id]++
					trained++
				}
			}
			var rest int64
			for r := range 3 {
				ids := requestIDs(t, filepath.Join(out, "rest-"+strconv.Itoa(r)))
				rest += int64(len(ids))
				for _, id := range ids {
					seen[id]++
				}
				env, _ := os.ReadFile(filepath.Join(out, "env2-"+strconv.Itoa(r)+".txt"))
				for _, want := range []string{"RETRAIN_SHARD_COUNT=3", "RETRAIN_SHARD_REST_EPOCH=0", "RETRAIN_SHARD_REST_DONE=0",
					fmt.Sprintf("RETRAIN_SHARD_REST_GLOBAL_ROWS=%d", rows-137-260), fmt.Sprintf("RETRAIN_SHARD_REST_ROWS=%d", len(ids))} {
					if !strings.Contains(string(env), want+"\n") {
						t.Errorf("rank %d's env lacks %s:\n%s", r, want, env)
					}
				}
			}
			t.Logf("%s: the first gang (2 ranks) trained %d rows, the resumed one (3 ranks) was given the rest, %d rows", format, trained, rest)
			for i := range int64(rows) {
				if n := seen[1<<32|i]; n != 1 {
					t.Fatalf("row %d trained %d times in epoch 0", i, n)
				}
			}
			if d, _ := res["data"].(map[string]any); d["rest_rows"] != float64(rows-137-260) {
				t.Errorf("outputs data %v: want rest_rows %d", d, rows-137-260)
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
