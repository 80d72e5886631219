package trainer

import (
	"math"
	"math/rand/v2"
)

// synth generates CTR data shaped like retrain's demo table: an impression
// of an ad to a user, a few dense user and ad features, a list feature (the
// user's recently clicked ads), and a click drawn from a known logistic
// model with per-user and per-ad effects:
//
//	p = sigmoid(bias + w·x + user[u] + ad[a])
//
// so tests can compare a trained model's AUC with the Bayes AUC of p.
type synth struct {
	bias   float64
	w      []float64
	user   []float64
	ad     []float64
	missed int // every missed-th value of dense feature 0 is missing (NaN)
}

var synthSchema = ModelConfig{
	Dense:  []string{"activity", "recency", "ad_quality", "ad_age"},
	Sparse: []string{"user_id", "ad_id", "recent_ads"},
}

func newSynth(seed uint64, users, ads int) *synth {
	r := rand.New(rand.NewPCG(seed, 0))
	s := &synth{bias: -1.2, w: []float64{0.8, -0.5, 0.4, 0}, missed: 50}
	s.user = make([]float64, users)
	for i := range s.user {
		s.user[i] = 0.6 * r.NormFloat64()
	}
	s.ad = make([]float64, ads)
	for i := range s.ad {
		s.ad[i] = 0.5 * r.NormFloat64()
	}
	return s
}

// sample draws n examples and their true click probabilities.
func (s *synth) sample(seed uint64, n int) ([]Example, []float64) {
	r := rand.New(rand.NewPCG(seed, 1))
	exs := make([]Example, n)
	probs := make([]float64, n)
	d := len(s.w)
	dense := make([]float32, n*d)
	for i := range exs {
		u, a := r.IntN(len(s.user)), r.IntN(len(s.ad))
		x := dense[i*d : (i+1)*d : (i+1)*d]
		z := s.bias + s.user[u] + s.ad[a]
		for j := range x {
			x[j] = float32(r.NormFloat64())
			if j == 0 && s.missed > 0 && i%s.missed == 0 {
				x[j] = float32(math.NaN()) // missing: no contribution
				continue
			}
			z += s.w[j] * float64(x[j])
		}
		recent := make([]uint64, r.IntN(4))
		for k := range recent {
			recent[k] = uint64(r.IntN(len(s.ad)))
		}
		p := 1 / (1 + math.Exp(-z))
		var y float32
		if r.Float64() < p {
			y = 1
		}
		exs[i] = Example{
			Dense:  x,
			Sparse: [][]uint64{{uint64(u)}, {uint64(a)}, recent},
			Label:  y,
		}
		probs[i] = p
	}
	return exs, probs
}

func labelsOf(exs []Example) []float32 {
	y := make([]float32, len(exs))
	for i, ex := range exs {
		y[i] = ex.Label
	}
	return y
}
