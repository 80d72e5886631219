package trainer

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestROCPerfectRanking(t *testing.T) {
	preds := []float64{0.9, 0.8, 0.7, 0.3, 0.2, 0.1}
	labels := []float32{1, 1, 1, 0, 0, 0}
	roc := ROC(preds, labels, DefaultROCPoints)
	want := []ROCPoint{{0, 0}, {0, 1.0 / 3}, {0, 2.0 / 3}, {0, 1}, {1.0 / 3, 1}, {2.0 / 3, 1}, {1, 1}}
	if len(roc) != len(want) {
		t.Fatalf("roc %v, want %v", roc, want)
	}
	for i := range want {
		if !near(roc[i].FPR, want[i].FPR, 1e-12) || !near(roc[i].TPR, want[i].TPR, 1e-12) {
			t.Errorf("point %d = %v, want %v", i, roc[i], want[i])
		}
	}
	if a := TrapezoidArea(roc); a != 1 {
		t.Errorf("area %v, want 1", a)
	}
}

func TestROCTies(t *testing.T) {
	// Every prediction tied: one diagonal step, area one half.
	roc := ROC([]float64{0.5, 0.5, 0.5, 0.5}, []float32{0, 1, 0, 1}, DefaultROCPoints)
	if len(roc) != 2 || roc[0] != (ROCPoint{0, 0}) || roc[1] != (ROCPoint{1, 1}) {
		t.Errorf("roc %v, want the diagonal", roc)
	}
	// Evaluate's worked example with three tie groups.
	preds := []float64{0.1, 0.1, 0.3, 0.7, 0.7, 0.7}
	labels := []float32{1, 0, 0, 1, 0, 1}
	roc = ROC(preds, labels, DefaultROCPoints)
	if len(roc) != 4 || !near(TrapezoidArea(roc), 5.5/9, 1e-12) {
		t.Errorf("roc %v, area %v, want 4 points, area %v", roc, TrapezoidArea(roc), 5.5/9)
	}
	if ROC([]float64{0.2, 0.4}, []float32{0, 0}, DefaultROCPoints) != nil {
		t.Error("a single class has an ROC curve")
	}
}

// Random scores rank nothing: the curve hugs the diagonal.
func TestROCRandomIsDiagonal(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := 200_000
	preds := make([]float64, n)
	labels := make([]float32, n)
	for i := range preds {
		preds[i] = rng.Float64()
		if rng.Float64() < 0.3 {
			labels[i] = 1
		}
	}
	roc := ROC(preds, labels, DefaultROCPoints)
	if len(roc) > DefaultROCPoints || roc[0] != (ROCPoint{0, 0}) || roc[len(roc)-1] != (ROCPoint{1, 1}) {
		t.Fatalf("%d points from %v to %v", len(roc), roc[0], roc[len(roc)-1])
	}
	for _, p := range roc {
		if math.Abs(p.TPR-p.FPR) > 0.01 {
			t.Errorf("point %v is off the diagonal", p)
		}
	}
}

// The trapezoid area under the curve is trainer's AUC, ties included; a
// thinned curve stays close to it.
func TestROCAreaIsAUC(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		name      string
		n, levels int // levels: distinct predictions (0: continuous)
		maxPoints int
		tol       float64
	}{
		{"ties, full curve", 5000, 50, DefaultROCPoints, 1e-9},
		{"many ties, full curve", 20_000, 7, DefaultROCPoints, 1e-9},
		{"no ties, full curve", 3000, 0, 4000, 1e-9},
		{"no ties, thinned", 50_000, 0, DefaultROCPoints, 1e-4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			preds := make([]float64, tc.n)
			labels := make([]float32, tc.n)
			for i := range preds {
				x := rng.Float64()
				if rng.Float64() < 0.2+0.5*x { // informative: AUC well above 0.5
					labels[i] = 1
				}
				if tc.levels > 0 {
					x = math.Round(x*float64(tc.levels-1)) / float64(tc.levels-1)
				}
				preds[i] = x
			}
			roc := ROC(preds, labels, tc.maxPoints)
			if len(roc) > tc.maxPoints || roc[0] != (ROCPoint{0, 0}) || roc[len(roc)-1] != (ROCPoint{1, 1}) {
				t.Fatalf("%d points from %v to %v", len(roc), roc[0], roc[len(roc)-1])
			}
			for i := 1; i < len(roc); i++ {
				if roc[i].FPR < roc[i-1].FPR || roc[i].TPR < roc[i-1].TPR {
					t.Fatalf("not monotone at %d: %v then %v", i, roc[i-1], roc[i])
				}
			}
			auc, area := AUC(preds, labels), TrapezoidArea(roc)
			t.Logf("%d rows, %d points: area %.9f, AUC %.9f, |diff| %.2g", tc.n, len(roc), area, auc, math.Abs(area-auc))
			if math.Abs(area-auc) > tc.tol {
				t.Errorf("area %.12f, AUC %.12f (%d points)", area, auc, len(roc))
			}
			if auc < 0.6 {
				t.Errorf("AUC %v: the data should be informative", auc)
			}
		})
	}
}

func TestCalibrationBins(t *testing.T) {
	preds := []float64{0.05, 0.15, 0.12, 0.95, 1, 0.5, math.NaN(), 1.5}
	labels := []float32{0, 1, 0, 1, 1, 0, 1, 1}
	bins := CalibrationBins(preds, labels, DefaultCalibrationBins)
	want := []CalibrationBin{
		{Lo: 0, Hi: 0.1, MeanPrediction: 0.05, MeanLabel: 0, Count: 1},
		{Lo: 0.1, Hi: 0.2, MeanPrediction: 0.135, MeanLabel: 0.5, Count: 2},
		{Lo: 0.5, Hi: 0.6, MeanPrediction: 0.5, MeanLabel: 0, Count: 1},
		{Lo: 0.9, Hi: 1, MeanPrediction: 0.975, MeanLabel: 1, Count: 2}, // 1 falls in the last bin
	}
	if len(bins) != len(want) {
		t.Fatalf("bins %+v, want %+v", bins, want)
	}
	for i, w := range want {
		b := bins[i]
		if !near(b.Lo, w.Lo, 1e-12) || !near(b.Hi, w.Hi, 1e-12) || !near(b.MeanPrediction, w.MeanPrediction, 1e-12) ||
			b.MeanLabel != w.MeanLabel || b.Count != w.Count {
			t.Errorf("bin %d = %+v, want %+v", i, b, w)
		}
	}
}
