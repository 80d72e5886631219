package trainer

import (
	"context"
	"fmt"
	"testing"
)

// TestReachesBayesAUC is the quality target on synthetic data: on a
// held-out set, the trained model's AUC is within 0.02 of the Bayes AUC, the
// AUC of the generator's own probabilities.
func TestReachesBayesAUC(t *testing.T) {
	if testing.Short() {
		t.Skip("trains for a few seconds")
	}
	gen := newSynth(11, 1000, 100)
	trainSet, _ := gen.sample(1, 150_000)
	heldOut, probs := gen.sample(2, 40_000)
	labels := labelsOf(heldOut)
	bayes, err := Evaluate(probs, labels)
	if err != nil {
		t.Fatal(err)
	}

	t.Logf("Bayes: %+v", bayes)
	for _, dim := range []int{0, 8} { // logistic regression, factorization machine
		t.Run(fmt.Sprintf("dim=%d", dim), func(t *testing.T) {
			reachBayes(t, dim, trainSet, heldOut, bayes)
		})
	}
}

func reachBayes(t *testing.T, dim int, trainSet, heldOut []Example, bayes Metrics) {
	cfg := Config{
		Model:        ModelConfig{Dense: synthSchema.Dense, Sparse: synthSchema.Sparse, Buckets: 1 << 16, Dim: dim},
		Seed:         1,
		Workers:      2,
		BatchSize:    512,
		LearningRate: 0.05,
		L2:           1e-3,
		Guard:        Guard{MaxEmbNorm: 100},
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var last Progress
	res, err := tr.Run(context.Background(), NewMemorySource(trainSet, 3, 3), nil, func(p Progress) { last = p })
	if err != nil {
		t.Fatal(err)
	}
	got, err := Evaluate(tr.Model().PredictBatch(heldOut, nil), labelsOf(heldOut))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d steps, last %+v", res.Step, last)
	t.Logf("model: %+v", got)
	if gap := bayes.AUC - got.AUC; gap > 0.02 {
		t.Errorf("AUC %.4f is %.4f below the Bayes AUC %.4f", got.AUC, gap, bayes.AUC)
	}
	if got.Calibration < 0.9 || got.Calibration > 1.1 {
		t.Errorf("calibration %.3f", got.Calibration)
	}
}
