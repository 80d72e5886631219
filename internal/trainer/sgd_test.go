package trainer

import (
	"bytes"
	"context"
	"errors"
	"math"
	"testing"
)

func testConfig(workers int) Config {
	return Config{
		Model:           ModelConfig{Dense: synthSchema.Dense, Sparse: synthSchema.Sparse, Buckets: 1 << 12, Dim: 4},
		Seed:            1,
		Workers:         workers,
		Shards:          8,
		BatchSize:       128,
		Steps:           40,
		LearningRate:    0.05,
		L2:              1e-4,
		CheckpointEvery: 10,
	}
}

func stateBytes(t *testing.T, tr *Trainer) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := tr.WriteState(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func train(t *testing.T, cfg Config, exs []Example, ck Checkpointer) (*Trainer, Result) {
	t.Helper()
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := tr.Run(context.Background(), NewMemorySource(exs, 9, 0), ck, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tr, res
}

// TestDeterministic checks that a seed fixes the weights bit for bit, for
// any number of workers, and that the seed matters.
func TestDeterministic(t *testing.T) {
	exs, _ := newSynth(1, 200, 30).sample(2, 3000)
	base, res := train(t, testConfig(1), exs, nil)
	if res.Step != 40 || res.Examples != 40*128 {
		t.Fatalf("result %+v", res)
	}
	want := stateBytes(t, base)
	for _, w := range []int{1, 2, 3, 8} {
		tr, _ := train(t, testConfig(w), exs, nil)
		if !bytes.Equal(stateBytes(t, tr), want) {
			t.Errorf("%d workers: state differs from 1 worker's", w)
		}
	}
	cfg := testConfig(2)
	cfg.Seed = 2
	if tr, _ := train(t, cfg, exs, nil); bytes.Equal(stateBytes(t, tr), want) {
		t.Error("seed 2 trained the same weights as seed 1")
	}
}

// TestResume crashes a run between checkpoints and resumes it in a new
// trainer: it must continue from the last checkpoint and end with exactly
// the state of an uninterrupted run.
func TestResume(t *testing.T) {
	exs, _ := newSynth(1, 200, 30).sample(2, 1000) // a few epochs in 40 steps
	straight, _ := train(t, testConfig(2), exs, &MemoryCheckpointer{})
	want := stateBytes(t, straight)

	ck := FileCheckpointer{Dir: t.TempDir()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, err := New(testConfig(2))
	if err != nil {
		t.Fatal(err)
	}
	var seen []Progress
	_, err = first.Run(ctx, NewMemorySource(exs, 9, 0), ck, func(p Progress) {
		seen = append(seen, p)
		if p.Step == 27 {
			cancel() // the worker dies between checkpoints 20 and 30
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("crashed run: %v", err)
	}
	if len(seen) != 27 || seen[9].CheckpointURI == "" || seen[10].CheckpointURI != "" {
		t.Fatalf("progress of the crashed run: %d records, step 10 %+v, step 11 %+v", len(seen), seen[9], seen[10])
	}

	second, err := New(testConfig(1)) // another worker count: same result
	if err != nil {
		t.Fatal(err)
	}
	res, err := second.Run(context.Background(), NewMemorySource(exs, 9, 0), ck, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.ResumedFrom != 20 || res.Step != 40 || res.Examples != 20*128 {
		t.Fatalf("resumed run: %+v", res)
	}
	if !bytes.Equal(stateBytes(t, second), want) {
		t.Fatal("resumed run ended with a different state than the uninterrupted one")
	}

	// Run again on the finished checkpoints: nothing left to do.
	third, _ := New(testConfig(1))
	res, err = third.Run(context.Background(), NewMemorySource(exs, 9, 0), ck, nil)
	if err != nil || res.ResumedFrom != 40 || res.Examples != 0 {
		t.Fatalf("run after the end: %+v, %v", res, err)
	}
}

// TestRunEndsWithSource trains until a finite source ends, with a short
// last batch, and checkpoints the end.
func TestRunEndsWithSource(t *testing.T) {
	exs, _ := newSynth(1, 50, 10).sample(2, 1000)
	cfg := testConfig(2)
	cfg.Steps = 0
	cfg.CheckpointEvery = 0
	ck := &MemoryCheckpointer{}
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var last Progress
	res, err := tr.Run(context.Background(), NewMemorySource(exs, 1, 2), ck, func(p Progress) { last = p })
	if err != nil {
		t.Fatal(err)
	}
	if res.Examples != 2000 || res.Step != 16 { // 15 full batches of 128, one of 80
		t.Errorf("result %+v", res)
	}
	if cks := ck.Checkpoints(); len(cks) != 1 || cks[0].Step != 16 || last.CheckpointURI != cks[0].URI {
		t.Errorf("checkpoints %+v, last progress %+v", cks, last)
	}
	if last.Step != 16 || !(last.Loss > 0) || !(last.EmbMaxNorm > 0) || !(last.ExamplesPerSec > 0) {
		t.Errorf("last progress %+v", last)
	}
}

func TestDivergence(t *testing.T) {
	exs, _ := newSynth(1, 200, 30).sample(2, 2000)
	cfg := testConfig(2)
	cfg.LearningRate = 1e4
	cfg.Guard.MaxEmbNorm = 100
	tr, _ := New(cfg)
	ck := &MemoryCheckpointer{}
	_, err := tr.Run(context.Background(), NewMemorySource(exs, 1, 0), ck, nil)
	var de *DivergenceError
	if !errors.As(err, &de) {
		t.Fatalf("huge learning rate: %v", err)
	}
	if de.Step != 1 || de.Metric != MetricEmbMaxNorm || !(de.Value > 100) || de.Limit != 100 {
		t.Errorf("divergence %+v", de)
	}
	if len(ck.Checkpoints()) != 0 {
		t.Error("a diverged state was checkpointed")
	}

	// An infinite feature makes the loss NaN at once (Inf times a zero weight).
	bad := append([]Example(nil), exs[:300]...)
	bad[200].Dense = []float32{1, float32(math.Inf(1)), 0, 0}
	tr, _ = New(testConfig(1))
	_, err = tr.Run(context.Background(), NewMemorySource(bad, 1, 0), nil, nil)
	if !errors.As(err, &de) || de.Metric != MetricLoss || !math.IsNaN(de.Value) || de.Step > 3 {
		t.Fatalf("infinite feature: %v", err)
	}
}

func TestBadExample(t *testing.T) {
	exs, _ := newSynth(1, 20, 5).sample(2, 100)
	exs[50].Label = 2
	tr, _ := New(testConfig(2))
	if _, err := tr.Run(context.Background(), NewMemorySource(exs, 1, 0), nil, nil); err == nil {
		t.Fatal("label 2 trained")
	}
	exs[50].Label = 1
	exs[60].Dense = exs[60].Dense[:2]
	tr, _ = New(testConfig(2))
	if _, err := tr.Run(context.Background(), NewMemorySource(exs, 1, 0), nil, nil); err == nil {
		t.Fatal("short dense features trained")
	}
}

// TestGradient checks the analytic gradient of one example's loss against
// central differences, for every weight it touches.
func TestGradient(t *testing.T) {
	cfg := Config{
		Model:     ModelConfig{Dense: []string{"a", "b"}, Transforms: []Transform{Log1p}, Sparse: []string{"u", "ad", "list"}, Buckets: 64, Dim: 3},
		Workers:   1,
		Shards:    1,
		BatchSize: 1,
		InitStd:   0.5,
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := tr.model
	for i := range m.emb {
		m.emb[i] += float32(i%7) * 0.05 // linear weights too
	}
	m.dense = []float32{0.3, -0.2, 0.1}
	ex := Example{Dense: []float32{1.5, -0.5}, Sparse: [][]uint64{{7}, {3}, {1, 2, 2}}, Label: 1}
	tr.prepare()
	tr.batch[0], tr.n = ex, 1
	tr.gradChunk(0, 0)
	loss := func() float64 {
		return logLoss(float64(m.forward(&ex, make([]float32, m.scratchLen()))), 1)
	}
	check := func(name string, w *float32, got float32) {
		const eps = 1e-2
		old := *w
		*w = old + eps
		up := loss()
		*w = old - eps
		down := loss()
		*w = old
		if want := (up - down) / (2 * eps); math.Abs(want-float64(got)) > 2e-3 {
			t.Errorf("%s: gradient %v, numeric %v", name, got, want)
		}
	}
	for j := range m.dense {
		check("dense", &m.dense[j], tr.chunks[0].dense[j])
	}
	acc := &tr.chunks[0].parts[0]
	if len(acc.rows) < 4 {
		t.Fatalf("%d rows touched", len(acc.rows))
	}
	for i, r := range acc.rows {
		for j := range m.width {
			check("emb", &m.emb[int(r)*m.width+j], acc.grads[i*m.width+j])
		}
	}
}

// TestStepAllocs checks that a training step allocates nothing once the
// buffers have grown.
func TestStepAllocs(t *testing.T) {
	exs, _ := newSynth(1, 200, 30).sample(2, 2000)
	tr, _ := New(testConfig(2))
	src := NewMemorySource(exs, 1, 0)
	tr.prepare()
	p := tr.startPool()
	defer p.stop()
	step := func() {
		n, err := src.Next(context.Background(), tr.batch)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := tr.trainStep(p, n); err != nil {
			t.Fatal(err)
		}
	}
	for range 20 {
		step()
	}
	if a := testing.AllocsPerRun(20, step); a != 0 {
		t.Errorf("%v allocations per step", a)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, mod := range []func(*Config){
		func(c *Config) { c.LearningRate = -1 },
		func(c *Config) { c.BatchSize = -1 },
		func(c *Config) { c.Model.Dim = -1 },
		func(c *Config) { c.Model.Dense = []string{"x", "x"} },
		func(c *Config) { c.Model.Sparse = []string{""} },
		func(c *Config) { c.Guard.MaxEmbNorm = math.NaN() },
	} {
		cfg := testConfig(1)
		mod(&cfg)
		if _, err := New(cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}
