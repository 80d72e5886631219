package trainer

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// LogLossEpsilon is the least probability log loss gives the true label, so
// that one confident mistake costs -log(ε) ≈ 34.5 rather than infinity.
const LogLossEpsilon = 1e-15

// Metrics are a model's figures on labelled data.
type Metrics struct {
	Count     int `json:"count"`
	Positives int `json:"positives"`
	// AUC is the area under the ROC curve: the probability that a random
	// positive scores above a random negative, ties counting half. NaN when
	// the data has a single class, for which it is undefined.
	AUC float64 `json:"auc"`
	// LogLoss is the mean negative log likelihood, the probability of each
	// true label clipped below at LogLossEpsilon.
	LogLoss float64 `json:"log_loss"`
	// Accuracy is the share of examples whose label is 1 exactly when the
	// prediction is at least 0.5.
	Accuracy float64 `json:"accuracy"`
	// Calibration is MeanPrediction / MeanLabel: 1 for a calibrated model,
	// above 1 when it overpredicts. +Inf when there are no positives but
	// some prediction is above 0, NaN when neither.
	Calibration    float64 `json:"calibration"`
	MeanPrediction float64 `json:"mean_prediction"`
	MeanLabel      float64 `json:"mean_label"`
}

// Evaluate computes the metrics of predicted probabilities against 0/1
// labels. It fails on mismatched lengths, no data, a label other than 0 or 1,
// or a prediction outside [0, 1] (NaN included).
func Evaluate(preds []float64, labels []float32) (Metrics, error) {
	if len(preds) != len(labels) {
		return Metrics{}, fmt.Errorf("trainer: %d predictions for %d labels", len(preds), len(labels))
	}
	if len(preds) == 0 {
		return Metrics{}, fmt.Errorf("trainer: no examples to evaluate")
	}
	var m Metrics
	var sumP, sumLoss float64
	var correct int
	for i, p := range preds {
		y := labels[i]
		if y != 0 && y != 1 {
			return Metrics{}, fmt.Errorf("trainer: label %v of example %d: want 0 or 1", y, i)
		}
		if !(p >= 0 && p <= 1) {
			return Metrics{}, fmt.Errorf("trainer: prediction %v of example %d: want 0 to 1", p, i)
		}
		q := p // the probability of the true label
		if y == 1 {
			m.Positives++
		} else {
			q = 1 - p
		}
		sumLoss -= math.Log(max(q, LogLossEpsilon))
		if (p >= 0.5) == (y == 1) {
			correct++
		}
		sumP += p
	}
	n := float64(len(preds))
	m.Count = len(preds)
	m.AUC = auc(preds, labels)
	m.LogLoss = sumLoss / n
	m.Accuracy = float64(correct) / n
	m.MeanPrediction = sumP / n
	m.MeanLabel = float64(m.Positives) / n
	m.Calibration = m.MeanPrediction / m.MeanLabel
	return m, nil
}

// AUC returns the area under the ROC curve of predictions against 0/1
// labels (see [Metrics.AUC]); it does not check its input as Evaluate does.
func AUC(preds []float64, labels []float32) float64 { return auc(preds, labels) }

// auc is the Mann-Whitney statistic: sort by prediction, give each group of
// tied predictions the average of its ranks, and
// AUC = (Σ ranks of positives − P(P+1)/2) / (P·N).
func auc(preds []float64, labels []float32) float64 {
	idx := make([]int, len(preds))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(preds[a], preds[b]) })
	var pos, neg, rankSum float64
	for i := 0; i < len(idx); {
		j := i
		for j < len(idx) && preds[idx[j]] == preds[idx[i]] {
			j++
		}
		avg := float64(i+1+j) / 2 // ranks i+1..j, 1-based
		for _, k := range idx[i:j] {
			if labels[k] == 1 {
				pos++
				rankSum += avg
			} else {
				neg++
			}
		}
		i = j
	}
	if pos == 0 || neg == 0 {
		return math.NaN()
	}
	return (rankSum - pos*(pos+1)/2) / (pos * neg)
}

// EvaluateSlices computes the metrics of each slice of the data, keys[i]
// being the slice of example i (an ad category, a country, ...).
func EvaluateSlices(preds []float64, labels []float32, keys []string) (map[string]Metrics, error) {
	if len(keys) != len(preds) || len(labels) != len(preds) {
		return nil, fmt.Errorf("trainer: %d predictions, %d labels, %d slice keys", len(preds), len(labels), len(keys))
	}
	groups := make(map[string][]int)
	for i, k := range keys {
		groups[k] = append(groups[k], i)
	}
	out := make(map[string]Metrics, len(groups))
	for k, idx := range groups {
		p := make([]float64, len(idx))
		y := make([]float32, len(idx))
		for j, i := range idx {
			p[j], y[j] = preds[i], labels[i]
		}
		m, err := Evaluate(p, y)
		if err != nil {
			return nil, fmt.Errorf("slice %q: %w", k, err)
		}
		out[k] = m
	}
	return out, nil
}
