package trainer

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestParseLine(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, tc := range []struct {
		line   string
		kind   EventKind
		want   Progress
		fields Field
	}{
		{line: "epoch 1: loading data", kind: LogLine},
		{line: "", kind: LogLine},
		{line: `{"level":"info","msg":"no step here, NaN"}`, kind: LogLine},
		{line: `{"step": "x"}`, kind: LogLine},
		{line: `{"step": 1.5}`, kind: LogLine},
		{line: `{"step": true}`, kind: LogLine},
		{line: `{"step": 3, broken`, kind: LogLine},
		{line: `[1, 2]`, kind: LogLine},
		{
			line:   `{"step": 5, "loss": 0.25, "emb_max_norm": 1.5, "examples_per_sec": 1e4, "checkpoint": "s3://b/run/step-5.pt"}`,
			kind:   ProgressEvent,
			want:   Progress{Step: 5, Loss: 0.25, EmbMaxNorm: 1.5, ExamplesPerSec: 1e4, CheckpointURI: "s3://b/run/step-5.pt"},
			fields: FieldLoss | FieldEmbMaxNorm | FieldExamplesPerSec | FieldCheckpoint,
		},
		{line: `  {"step": 3}  `, kind: ProgressEvent, want: Progress{Step: 3}},
		{line: `{"step": 3, "total": 1200}`, kind: ProgressEvent, want: Progress{Step: 3, Total: 1200}, fields: FieldTotal},
		{line: `{"step": 3, "total": 0}`, kind: ProgressEvent, want: Progress{Step: 3}},
		{line: `{"step": 3, "total": 2.5}`, kind: ProgressEvent, want: Progress{Step: 3}},
		{line: `{"step": 3, "total": "many"}`, kind: ProgressEvent, want: Progress{Step: 3}},
		{line: `{"step": 3, "loss": null, "checkpoint": null}`, kind: ProgressEvent, want: Progress{Step: 3}},
		// Python's json.dumps writes non-finite floats bare.
		{line: `{"step": 7, "loss": NaN}`, kind: ProgressEvent, want: Progress{Step: 7, Loss: nan}, fields: FieldLoss},
		{
			line:   `{"step":7,"loss":Infinity,"emb_max_norm":-Infinity}`,
			kind:   ProgressEvent,
			want:   Progress{Step: 7, Loss: inf, EmbMaxNorm: -inf},
			fields: FieldLoss | FieldEmbMaxNorm,
		},
		{line: `{"step": 8, "loss": "nan"}`, kind: ProgressEvent, want: Progress{Step: 8, Loss: nan}, fields: FieldLoss},
		{line: `{"msg": "a \"NaN\" b", "step": 2, "loss": 1}`, kind: ProgressEvent, want: Progress{Step: 2, Loss: 1}, fields: FieldLoss},
		{line: `{"step": 2.0e1}`, kind: ProgressEvent, want: Progress{Step: 20}},
		// A shard position: both fields, whole numbers of 0 or more.
		{line: `{"step": 9, "shard_epoch": 2, "shard_done": [10, 12]}`, kind: ProgressEvent, want: Progress{Step: 9, ShardEpoch: 2, ShardDone: []int64{10, 12}}, fields: FieldShard},
		{line: `{"step": 9, "shard_epoch": 0, "shard_done": 40}`, kind: ProgressEvent, want: Progress{Step: 9, ShardDone: []int64{40}}, fields: FieldShard},
		{line: `{"step": 9, "shard_done": 40}`, kind: ProgressEvent, want: Progress{Step: 9}},
		{line: `{"step": 9, "shard_epoch": 1}`, kind: ProgressEvent, want: Progress{Step: 9}},
		{line: `{"step": 9, "shard_epoch": -1, "shard_done": 4}`, kind: ProgressEvent, want: Progress{Step: 9}},
		{line: `{"step": 9, "shard_epoch": 1, "shard_done": [4, -1]}`, kind: ProgressEvent, want: Progress{Step: 9}},
		{line: `{"step": 9, "shard_epoch": 1, "shard_done": [4, 1.5]}`, kind: ProgressEvent, want: Progress{Step: 9}},
		{line: `{"step": 9, "shard_epoch": 1, "shard_done": []}`, kind: ProgressEvent, want: Progress{Step: 9}},
		{line: `{"step": 9, "shard_epoch": 1, "shard_done": ["4"]}`, kind: ProgressEvent, want: Progress{Step: 9}},
		{line: `{"step": 9, "shard_epoch": 1, "shard_done": 1e300}`, kind: ProgressEvent, want: Progress{Step: 9}},
	} {
		e := ParseLine(tc.line)
		if e.Line != tc.line || e.Kind != tc.kind || e.Fields != tc.fields || !sameProgress(e.Progress, tc.want) {
			t.Errorf("ParseLine(%q) = %+v, want kind %d, %+v, fields %b", tc.line, e, tc.kind, tc.want, tc.fields)
		}
	}
}

func sameProgress(a, b Progress) bool {
	eq := func(x, y float64) bool { return x == y || math.IsNaN(x) && math.IsNaN(y) }
	return a.Step == b.Step && eq(a.Loss, b.Loss) && eq(a.EmbMaxNorm, b.EmbMaxNorm) &&
		eq(a.ExamplesPerSec, b.ExamplesPerSec) && a.CheckpointURI == b.CheckpointURI &&
		a.ShardEpoch == b.ShardEpoch && slices.Equal(a.ShardDone, b.ShardDone)
}

func TestGuardEvents(t *testing.T) {
	g := Guard{MaxEmbNorm: 50}
	for _, tc := range []struct {
		line   string
		metric string // "" for no divergence
	}{
		{`Traceback: loss is NaN`, ""},
		{`{"step": 1, "loss": 0.7, "emb_max_norm": 3}`, ""},
		{`{"step": 2}`, ""},
		{`{"step": 3, "loss": NaN, "emb_max_norm": 3}`, MetricLoss},
		{`{"step": 3, "loss": -Infinity}`, MetricLoss},
		{`{"step": 4, "loss": 0.7, "emb_max_norm": 50.5}`, MetricEmbMaxNorm},
		{`{"step": 4, "emb_max_norm": NaN}`, MetricEmbMaxNorm},
		{`{"step": 4, "emb_max_norm": 50}`, ""},
	} {
		err := g.CheckEvent(ParseLine(tc.line))
		var de *DivergenceError
		switch {
		case tc.metric == "" && err != nil:
			t.Errorf("%s: %v", tc.line, err)
		case tc.metric != "" && (!errors.As(err, &de) || de.Metric != tc.metric || de.Step != ParseLine(tc.line).Progress.Step):
			t.Errorf("%s: %v, want divergence of %s", tc.line, err, tc.metric)
		}
	}
	// With no limit, any finite norm passes.
	if err := (Guard{}).CheckEmbNorm(1, 1e30); err != nil {
		t.Error(err)
	}
	if err := (Guard{}).CheckEmbNorm(1, math.Inf(1)); err == nil {
		t.Error("infinite norm passed")
	}
}

func TestReadEvents(t *testing.T) {
	long := strings.Repeat("x", MaxLine+100)
	out := "starting\r\n{\"step\": 1, \"loss\": 0.5}\n" + long + "\n\n{\"step\": 2, \"loss\": NaN}"
	var got []Event
	err := ReadEvents(strings.NewReader(out), func(e Event) error {
		got = append(got, e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 {
		t.Fatalf("%d events: %+v", len(got), got)
	}
	if got[0].Line != "starting" || got[1].Kind != ProgressEvent || got[2].Line != long[:MaxLine] ||
		got[3].Line != "" || got[4].Progress.Step != 2 {
		t.Errorf("events %+v", got)
	}

	// A guard failing in fn stops the reading.
	n := 0
	err = ReadEvents(strings.NewReader(out), func(e Event) error {
		n++
		return Guard{}.CheckEvent(e)
	})
	var de *DivergenceError
	if !errors.As(err, &de) || de.Step != 2 || n != 5 {
		t.Errorf("guarded read: %v after %d events", err, n)
	}
}

func TestShardEnvRest(t *testing.T) {
	s := ShardEnv{Data: "/d/rank-1", Index: 1, Count: 3, Rows: 30, MinRows: 29, GlobalRows: 89, Epoch: 0}
	if got := s.Environ(); slices.ContainsFunc(got, func(kv string) bool { return strings.HasPrefix(kv, "RETRAIN_SHARD_REST") }) {
		t.Errorf("no rest: %q", got)
	}
	s.Rest = &ShardRest{Data: "/d/rest-1", Epoch: 2, Rows: 7, MinRows: 6, GlobalRows: 20, Done: 3}
	got := s.Environ()
	for _, want := range []string{"RETRAIN_SHARD_REST_DATA=/d/rest-1", "RETRAIN_SHARD_REST_EPOCH=2", "RETRAIN_SHARD_REST_ROWS=7",
		"RETRAIN_SHARD_REST_MIN_ROWS=6", "RETRAIN_SHARD_REST_GLOBAL_ROWS=20", "RETRAIN_SHARD_REST_DONE=3", "RETRAIN_TRAIN_DATA=/d/rank-1"} {
		if !slices.Contains(got, want) {
			t.Errorf("Environ() = %q: want %s", got, want)
		}
	}
}

func TestEnviron(t *testing.T) {
	got := Env{TrainData: "s3://b/train", CheckpointURI: "/tmp/ck", ModelOut: "/tmp/model.pt"}.Environ()
	want := []string{"RETRAIN_TRAIN_DATA=s3://b/train", "RETRAIN_CHECKPOINT_URI=/tmp/ck", "RETRAIN_MODEL_OUT=/tmp/model.pt"}
	if !slices.Equal(got, want) {
		t.Errorf("Environ() = %q, want %q", got, want)
	}
}

// TestShardEnvWindow: RETRAIN_SHARD_WINDOW is set only for a stream with
// a window.
func TestShardEnvWindow(t *testing.T) {
	has := func(s ShardEnv) bool {
		return slices.ContainsFunc(s.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "RETRAIN_SHARD_WINDOW=") })
	}
	s := ShardEnv{Data: "/d/rank-0", Count: 1, Rows: 3, MinRows: 3, GlobalRows: 3, Window: 2}
	if has(s) {
		t.Errorf("a window without a stream: %q", s.Environ())
	}
	s.Stream, s.Files = true, 4
	if !slices.Contains(s.Environ(), "RETRAIN_SHARD_WINDOW=2") {
		t.Errorf("a streamed window of 2: %q", s.Environ())
	}
	s.Window = 0
	if has(s) {
		t.Errorf("a stream without a window: %q", s.Environ())
	}
}
