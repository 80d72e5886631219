package trainer

import (
	"math"
	"testing"
)

func TestEvaluate(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, tc := range []struct {
		name   string
		preds  []float64
		labels []float32
		want   Metrics
	}{{
		// The classic example: of the four positive-negative pairs, 0.35 <
		// 0.4 is the one ranked wrong.
		name:   "no ties",
		preds:  []float64{0.1, 0.4, 0.35, 0.8},
		labels: []float32{0, 0, 1, 1},
		want: Metrics{Count: 4, Positives: 2, AUC: 0.75,
			LogLoss:  -(math.Log(0.9) + math.Log(0.6) + math.Log(0.35) + math.Log(0.8)) / 4,
			Accuracy: 0.75, Calibration: 0.4125 / 0.5, MeanPrediction: 0.4125, MeanLabel: 0.5},
	}, {
		// Ranks 1, 2.5, 2.5, 4: positives 2.5 + 4 = 6.5, (6.5 - 3) / 4.
		name:   "tie across classes",
		preds:  []float64{0.2, 0.6, 0.6, 0.9},
		labels: []float32{0, 0, 1, 1},
		want: Metrics{Count: 4, Positives: 2, AUC: 0.875,
			LogLoss:  -(math.Log(0.8) + math.Log(0.4) + math.Log(0.6) + math.Log(0.9)) / 4,
			Accuracy: 0.75, Calibration: 0.575 / 0.5, MeanPrediction: 0.575, MeanLabel: 0.5},
	}, {
		// All tied: every pair counts half. 0.5 predicts a click.
		name:   "all tied",
		preds:  []float64{0.5, 0.5, 0.5, 0.5},
		labels: []float32{0, 1, 0, 1},
		want: Metrics{Count: 4, Positives: 2, AUC: 0.5, LogLoss: math.Ln2,
			Accuracy: 0.5, Calibration: 1, MeanPrediction: 0.5, MeanLabel: 0.5},
	}, {
		// Ranks 1.5, 1.5, 3, 5, 5, 5 (three ties); positives at 1.5, 5, 5:
		// (11.5 - 6) / 9.
		name:   "several tie groups",
		preds:  []float64{0.1, 0.1, 0.3, 0.7, 0.7, 0.7},
		labels: []float32{1, 0, 0, 1, 0, 1},
		want: Metrics{Count: 6, Positives: 3, AUC: 5.5 / 9,
			LogLoss: -(math.Log(0.1) + math.Log(0.9) + math.Log(0.7) + math.Log(0.7) +
				math.Log(0.3) + math.Log(0.7)) / 6,
			Accuracy: 4.0 / 6, Calibration: (2.6 / 6) / 0.5, MeanPrediction: 2.6 / 6, MeanLabel: 0.5},
	}, {
		// Certain and wrong: clipped to 1e-15, -log(1e-15) each.
		name:   "clipping",
		preds:  []float64{0, 1},
		labels: []float32{1, 0},
		want: Metrics{Count: 2, Positives: 1, AUC: 0, LogLoss: -math.Log(1e-15),
			Accuracy: 0, Calibration: 1, MeanPrediction: 0.5, MeanLabel: 0.5},
	}, {
		name:   "single class",
		preds:  []float64{0.2, 0.4},
		labels: []float32{0, 0},
		want: Metrics{Count: 2, AUC: nan, LogLoss: -(math.Log(0.8) + math.Log(0.6)) / 2,
			Accuracy: 1, Calibration: inf, MeanPrediction: 0.3},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Evaluate(tc.preds, tc.labels)
			if err != nil {
				t.Fatal(err)
			}
			if got.Count != tc.want.Count || got.Positives != tc.want.Positives {
				t.Errorf("count %d/%d, want %d/%d", got.Positives, got.Count, tc.want.Positives, tc.want.Count)
			}
			for _, f := range []struct {
				name      string
				got, want float64
			}{
				{"auc", got.AUC, tc.want.AUC},
				{"log loss", got.LogLoss, tc.want.LogLoss},
				{"accuracy", got.Accuracy, tc.want.Accuracy},
				{"calibration", got.Calibration, tc.want.Calibration},
				{"mean prediction", got.MeanPrediction, tc.want.MeanPrediction},
				{"mean label", got.MeanLabel, tc.want.MeanLabel},
			} {
				if !near(f.got, f.want, 1e-9) {
					t.Errorf("%s = %v, want %v", f.name, f.got, f.want)
				}
			}
		})
	}
}

func near(a, b, tol float64) bool {
	if math.IsNaN(b) {
		return math.IsNaN(a)
	}
	if math.IsInf(b, 0) {
		return a == b
	}
	return math.Abs(a-b) <= tol*max(1, math.Abs(b))
}

func TestEvaluateErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		preds  []float64
		labels []float32
	}{
		{"empty", nil, nil},
		{"lengths", []float64{0.5}, []float32{1, 0}},
		{"label 2", []float64{0.5}, []float32{2}},
		{"label 0.5", []float64{0.5}, []float32{0.5}},
		{"prediction NaN", []float64{math.NaN()}, []float32{1}},
		{"prediction 1.5", []float64{1.5}, []float32{1}},
	} {
		if _, err := Evaluate(tc.preds, tc.labels); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

func TestEvaluateSlices(t *testing.T) {
	preds := []float64{0.1, 0.4, 0.35, 0.8, 0.5, 0.5}
	labels := []float32{0, 0, 1, 1, 0, 1}
	keys := []string{"a", "a", "a", "a", "b", "b"}
	got, err := EvaluateSlices(preds, labels, keys)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["a"].AUC != 0.75 || got["a"].Count != 4 || got["b"].AUC != 0.5 || got["b"].Count != 2 {
		t.Errorf("slices %+v", got)
	}
	if _, err := EvaluateSlices(preds, labels, keys[1:]); err == nil {
		t.Error("short keys accepted")
	}
}
