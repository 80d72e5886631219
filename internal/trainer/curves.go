package trainer

import (
	"cmp"
	"slices"
)

// ROCPoint is one point of an ROC curve: the false and true positive rates
// of predicting positive at and above some threshold.
type ROCPoint struct {
	FPR float64 `json:"fpr"`
	TPR float64 `json:"tpr"`
}

// DefaultROCPoints is how many points ROC keeps for a report: enough for a
// plot a few hundred pixels wide to look exact.
const DefaultROCPoints = 200

// ROC returns the ROC curve of predictions against 0/1 labels, from (0, 0)
// to (1, 1), with at most maxPoints points (at least 2). The full curve has
// one point per distinct prediction: lowering the threshold past a group
// of tied predictions moves by all of its positives and negatives at once,
// so ties draw a diagonal segment and the trapezoid area under the full
// curve is exactly [AUC]'s ties-count-half statistic. Longer curves are
// thinned to points evenly spaced along the curve's length (both ends
// kept). nil when the data has a single class, like AUC's NaN. It does not
// check its input as Evaluate does: labels other than 1 count as 0, and
// examples past the shorter of preds and labels are left out.
func ROC(preds []float64, labels []float32, maxPoints int) []ROCPoint {
	maxPoints = max(maxPoints, 2)
	idx := make([]int, min(len(preds), len(labels)))
	for i := range idx {
		idx[i] = i
	}
	// Highest prediction first: the threshold goes down.
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(preds[b], preds[a]) })
	var pos, neg float64
	for _, i := range idx {
		if labels[i] == 1 {
			pos++
		} else {
			neg++
		}
	}
	if pos == 0 || neg == 0 {
		return nil
	}
	curve := []ROCPoint{{0, 0}}
	var tp, fp float64
	for i := 0; i < len(idx); {
		j := i
		for j < len(idx) && preds[idx[j]] == preds[idx[i]] {
			if labels[idx[j]] == 1 {
				tp++
			} else {
				fp++
			}
			j++
		}
		curve = append(curve, ROCPoint{FPR: fp / neg, TPR: tp / pos})
		i = j
	}
	// The last point is (1, 1) up to rounding; make it exact.
	curve[len(curve)-1] = ROCPoint{1, 1}
	return thin(curve, maxPoints)
}

// thin keeps at most n points of a monotone curve from (0,0) to (1,1):
// the ends, and the first point past each of n-2 marks evenly spaced on
// the curve's length (|Δfpr| + |Δtpr|, 2 in all), so steep and flat parts
// keep equal detail.
func thin(curve []ROCPoint, n int) []ROCPoint {
	if len(curve) <= n {
		return curve
	}
	out := make([]ROCPoint, 0, n)
	out = append(out, curve[0])
	step := 2.0 / float64(n-1)
	next := step
	var walked float64
	for i := 1; i < len(curve)-1; i++ {
		walked += curve[i].FPR - curve[i-1].FPR + curve[i].TPR - curve[i-1].TPR
		if walked >= next && len(out) < n-1 {
			out = append(out, curve[i])
			for next <= walked {
				next += step
			}
		}
	}
	return append(out, curve[len(curve)-1])
}

// TrapezoidArea is the area under a curve of ROC points taken in order.
func TrapezoidArea(curve []ROCPoint) float64 {
	var a float64
	for i := 1; i < len(curve); i++ {
		a += (curve[i].FPR - curve[i-1].FPR) * (curve[i].TPR + curve[i-1].TPR) / 2
	}
	return a
}

// CalibrationBin is one bin of a reliability diagram: the examples whose
// prediction is in [Lo, Hi) (the last bin includes 1), their mean
// prediction and the share of them that are positive.
type CalibrationBin struct {
	Lo             float64 `json:"lo"`
	Hi             float64 `json:"hi"`
	MeanPrediction float64 `json:"mean_prediction"`
	MeanLabel      float64 `json:"mean_label"`
	Count          int     `json:"count"`
}

// DefaultCalibrationBins is the number of equal-width bins of a report's
// reliability diagram.
const DefaultCalibrationBins = 10

// CalibrationBins groups the examples into n equal-width bins of the
// predicted probability and returns the bins that hold any, lowest first.
// A calibrated model's bins lie on the diagonal (mean label = mean
// prediction). Predictions outside [0, 1], NaN included, are left out
// (Evaluate refuses them).
func CalibrationBins(preds []float64, labels []float32, n int) []CalibrationBin {
	n = max(n, 1)
	sumP := make([]float64, n)
	sumY := make([]float64, n)
	count := make([]int, n)
	for i, p := range preds {
		if !(p >= 0 && p <= 1) || i >= len(labels) {
			continue
		}
		b := min(int(p*float64(n)), n-1)
		sumP[b] += p
		if labels[i] == 1 {
			sumY[b]++
		}
		count[b]++
	}
	var out []CalibrationBin
	for b := range n {
		if count[b] == 0 {
			continue
		}
		c := float64(count[b])
		out = append(out, CalibrationBin{
			Lo: float64(b) / float64(n), Hi: float64(b+1) / float64(n),
			MeanPrediction: sumP[b] / c, MeanLabel: sumY[b] / c, Count: count[b],
		})
	}
	return out
}
