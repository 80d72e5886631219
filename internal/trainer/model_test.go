package trainer

import (
	"bytes"
	"math"
	"testing"
)

// TestPredict checks the score against a hand computation:
//
//	bias + w·x           = -0.25 + 0.5·2           = 0.75
//	linear id weights    = 0.1 + 0.2 + (0.3+0.5)/2 = 0.7
//	⟨user, ad⟩           = 1·3 + 2·(-1)            = 1
//	⟨user, mean(list)⟩   = 1·2 + 2·1               = 4
//	⟨ad, mean(list)⟩     = 3·2 + (-1)·1            = 5
//
// 11.45 in all; a missing (NaN) dense value drops its 1.
func TestPredict(t *testing.T) {
	m, err := newModel(ModelConfig{Dense: []string{"x"}, Sparse: []string{"user", "ad", "list"}, Buckets: 1 << 10, Dim: 2})
	if err != nil {
		t.Fatal(err)
	}
	m.dense = []float32{0.5, -0.25}
	rows := map[int][]float32{
		m.bucket(0, 42): {0.1, 1, 2},
		m.bucket(1, 42): {0.2, 3, -1},
		m.bucket(2, 7):  {0.3, 1, 1},
		m.bucket(2, 8):  {0.5, 3, 1},
	}
	if len(rows) != 4 {
		t.Fatal("test ids collide")
	}
	for r, v := range rows {
		copy(m.row(r), v)
	}
	ex := Example{Dense: []float32{2}, Sparse: [][]uint64{{42}, {42}, {7, 8}}}
	if got, want := m.Predict(ex), sigmoid(11.45); math.Abs(got-want) > 1e-6 {
		t.Errorf("Predict = %v, want %v", got, want)
	}
	ex.Dense[0] = float32(math.NaN())
	if got, want := m.Predict(ex), sigmoid(10.45); math.Abs(got-want) > 1e-6 {
		t.Errorf("Predict with a missing value = %v, want %v", got, want)
	}
	// No ids at all: the bias alone.
	if got, want := m.Predict(Example{}), sigmoid(-0.25); math.Abs(got-want) > 1e-7 {
		t.Errorf("Predict of nothing = %v, want %v", got, want)
	}
	batch := m.PredictBatch([]Example{ex, {}}, nil)
	if len(batch) != 2 || batch[0] != m.Predict(ex) || batch[1] != m.Predict(Example{}) {
		t.Errorf("PredictBatch = %v", batch)
	}
	if got := m.EmbMaxNorm(); math.Abs(got-math.Sqrt(0.25+9+1)) > 1e-6 {
		t.Errorf("EmbMaxNorm = %v", got)
	}
}

// TestPairwise checks the O(F·Dim) pairwise term against the sum over
// pairs, with trained-looking random weights.
func TestPairwise(t *testing.T) {
	tr, err := New(Config{Model: ModelConfig{Sparse: []string{"a", "b", "c", "d"}, Buckets: 256, Dim: 5}, InitStd: 0.7})
	if err != nil {
		t.Fatal(err)
	}
	m := tr.Model()
	ex := Example{Sparse: [][]uint64{{1}, {2, 3}, {}, {4}}}
	want := float64(m.dense[0])
	var v [][]float32
	for f, ids := range ex.Sparse {
		if len(ids) == 0 {
			continue
		}
		pooled := make([]float32, m.width)
		for _, id := range ids {
			for j, x := range m.row(m.bucket(f, id)) {
				pooled[j] += x / float32(len(ids))
			}
		}
		want += float64(pooled[0])
		v = append(v, pooled[1:])
	}
	for i := range v {
		for k := i + 1; k < len(v); k++ {
			for j := range v[i] {
				want += float64(v[i][j]) * float64(v[k][j])
			}
		}
	}
	if got := m.forward(&ex, make([]float32, m.scratchLen())); math.Abs(float64(got)-want) > 1e-5 {
		t.Errorf("score %v, pairwise sum %v", got, want)
	}
}

func TestModelRoundTrip(t *testing.T) {
	exs, _ := newSynth(1, 100, 10).sample(2, 2000)
	tr, _ := train(t, testConfig(2), exs, nil)
	var b bytes.Buffer
	if _, err := tr.Model().WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	data := b.Bytes()
	m, err := ReadModel(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	for _, ex := range exs[:50] {
		if m.Predict(ex) != tr.Model().Predict(ex) {
			t.Fatal("read model predicts differently")
		}
	}
	if c := m.Config(); c.Buckets != 1<<12 || c.Dim != 4 || len(c.Sparse) != 3 {
		t.Errorf("config %+v", c)
	}
	for _, bad := range [][]byte{
		data[:len(data)-1],
		append(append([]byte{}, data[:100]...), data[101:]...),
		[]byte("RTRNCKPT"),
		nil,
	} {
		if _, err := ReadModel(bytes.NewReader(bad)); err == nil {
			t.Errorf("read a model from %d corrupt bytes", len(bad))
		}
	}
	flipped := bytes.Clone(data)
	flipped[len(flipped)/2] ^= 1
	if _, err := ReadModel(bytes.NewReader(flipped)); err == nil {
		t.Error("read a model with a flipped bit")
	}
}

func TestTransforms(t *testing.T) {
	m, err := newModel(ModelConfig{
		Dense:      []string{"activity", "ctr", "count", "raw"},
		Transforms: []Transform{Log, Logit, Log1p}, // raw: Identity
		Buckets:    8,
	})
	if err != nil {
		t.Fatal(err)
	}
	m.dense = []float32{1, 1, 1, 1, 0}
	for _, tc := range []struct {
		x    []float32
		want float64
	}{
		{[]float32{math.E, 0.5, 0, 2}, 1 + 0 + 0 + 2},
		{[]float32{1, 0.8, math.E - 1, -1}, 0 + math.Log(4) + 1 - 1},
		{[]float32{0, 1, -5, 0}, math.Log(1e-6) + math.Log((1-1e-4)/1e-4)}, // clipped
		{[]float32{float32(math.NaN()), 0.5, 0, 0}, 0},                     // missing
	} {
		if got := m.Predict(Example{Dense: tc.x}); math.Abs(got-sigmoid(tc.want)) > 1e-6 {
			t.Errorf("Predict(%v) = %v, want sigmoid(%v) = %v", tc.x, got, tc.want, sigmoid(tc.want))
		}
	}

	var b bytes.Buffer
	if _, err := m.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	read, err := ReadModel(&b)
	if err != nil {
		t.Fatal(err)
	}
	if got := read.Config().Transforms; len(got) != 4 || got[0] != Log || got[1] != Logit || got[2] != Log1p || got[3] != Identity {
		t.Errorf("transforms read back: %v", got)
	}

	for _, name := range []string{"identity", "log", "log1p", "logit"} {
		var tr Transform
		if err := tr.UnmarshalText([]byte(name)); err != nil {
			t.Fatal(err)
		}
		if text, _ := tr.MarshalText(); string(text) != name {
			t.Errorf("%s reads back as %s", name, text)
		}
	}
	var tr Transform
	if err := tr.UnmarshalText([]byte("sqrt")); err == nil {
		t.Error("transform sqrt accepted")
	}
	if _, err := newModel(ModelConfig{Dense: []string{"a"}, Transforms: []Transform{Log, Log}}); err == nil {
		t.Error("more transforms than dense features accepted")
	}
}

func TestPredictAllocs(t *testing.T) {
	exs, _ := newSynth(1, 100, 10).sample(2, 10)
	tr, _ := New(testConfig(1))
	m := tr.Model()
	if a := testing.AllocsPerRun(100, func() { m.Predict(exs[3]) }); a != 0 {
		t.Errorf("Predict: %v allocations", a)
	}
}
