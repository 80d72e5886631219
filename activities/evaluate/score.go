package evaluate

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/retrain-ml/retrain/activities/train"
	"github.com/retrain-ml/retrain/internal/dataset"
	"github.com/retrain-ml/retrain/internal/gate"
	"github.com/retrain-ml/retrain/internal/trainer"
	"github.com/retrain-ml/retrain/nodetype"

	"github.com/retrain-ml/retrain/errtype"
)

// Headline metric names, as the gate reads them.
const (
	MetricAUC         = "auc"
	MetricLogLoss     = "log_loss"
	MetricAccuracy    = "accuracy"
	MetricCalibration = "calibration"
	// MetricCount is the number of rows a figure was computed on.
	MetricCount = "count"
)

func metricMap(m trainer.Metrics) map[string]float64 {
	return map[string]float64{
		MetricAUC: m.AUC, MetricLogLoss: m.LogLoss, MetricAccuracy: m.Accuracy, MetricCalibration: m.Calibration,
		"mean_prediction": m.MeanPrediction, "mean_label": m.MeanLabel, MetricCount: float64(m.Count),
	}
}

func numbers(m map[string]float64) map[string]gate.Number {
	out := make(map[string]gate.Number, len(m))
	for k, v := range m {
		out[k] = gate.Number(v)
	}
	return out
}

func sliceNumbers(s map[string]map[string]float64) map[string]map[string]gate.Number {
	if s == nil {
		return nil
	}
	out := make(map[string]map[string]gate.Number, len(s))
	for k, m := range s {
		out[k] = numbers(m)
	}
	return out
}

// outputMetrics is a metric map fit for outputs: non-finite figures are
// null (the metrics file has them as "NaN").
func outputMetrics(m map[string]float64) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = train.FiniteOrNil(v)
	}
	return out
}

// scored is one model scored on the data.
type scored struct {
	metrics     map[string]float64
	slices      map[string]map[string]float64
	roc         []trainer.ROCPoint
	calibration []trainer.CalibrationBin
}

// modelMetrics is s as the metrics file holds it.
func (s scored) modelMetrics() ModelMetrics {
	return ModelMetrics{Overall: numbers(s.metrics), Slices: sliceNumbers(s.slices), ROC: s.roc, CalibrationBins: s.calibration}
}

// score computes a builtin model's metrics on the node's dataset, overall
// and per slice (the maxSlices largest), streaming the rows a batch at a
// time: memory stays bounded by a batch and the metric stream's run
// (trainer.MetricStream), whatever the dataset's size. what names the model
// in errors.
func (a *attempt) score(ctx context.Context, m *trainer.Model, what string) (scored, error) {
	cfg := m.Config()
	if err := a.sd.Record.Schema.HasFeatures(cfg.Dense, cfg.Sparse); err != nil {
		return scored{}, nodetype.Permanent(errtype.BadInput, "%s cannot score this data: %v", what, err)
	}
	perSlice := a.w.Slices && a.sd.Record.Schema.Slice != ""
	ms := trainer.NewMetricStream(0, trainer.DefaultCalibrationBins)
	defer ms.Close()
	var preds []float64
	var bad error
	err := a.sd.Batches(ctx, a.e.store, a.w.Dataset, func(d *dataset.Data) error {
		exs, err := d.Examples(cfg.Dense, cfg.Sparse)
		if err == nil {
			preds = m.PredictBatch(exs, preds)
			var keys []string
			if perSlice {
				keys = d.Slice
			}
			err = ms.Add(preds, d.Label, keys)
		}
		if err != nil {
			bad = nodetype.Permanent(errtype.BadInput, "%s cannot score this data: %v", what, err)
		}
		return bad
	})
	if err != nil {
		return scored{}, err
	}
	return finish(ms, perSlice, a.w.MaxSlices)
}

// finish computes a scored model from its metric stream: the maxSlices
// largest slices when perSlice.
func finish(ms *trainer.MetricStream, perSlice bool, maxSlices int) (scored, error) {
	res, err := ms.Finish(trainer.DefaultROCPoints)
	if err != nil {
		return scored{}, err
	}
	s := scored{metrics: metricMap(res.Overall), roc: res.ROC, calibration: res.Calibration}
	if perSlice && res.Slices != nil {
		s.slices = map[string]map[string]float64{}
		for _, k := range largest(res.Slices, func(m trainer.Metrics) int { return m.Count }, maxSlices) {
			s.slices[k] = metricMap(res.Slices[k])
		}
	}
	return s, nil
}

// fromPredictions computes the metrics, ROC curve, calibration bins and
// (perSlice) the metrics of the maxSlices largest slices of predictions of
// the data's rows, in its order. The builtin scorer and an evaluator
// program that writes predictions both go through a MetricStream, so that
// a gate compares figures computed the same way.
func fromPredictions(preds []float64, d *dataset.Data, perSlice bool, maxSlices int) (scored, error) {
	perSlice = perSlice && d.Slice != nil
	var keys []string
	if perSlice {
		keys = d.Slice
	}
	ms := trainer.NewMetricStream(0, trainer.DefaultCalibrationBins)
	defer ms.Close()
	if err := ms.Add(preds, d.Label, keys); err != nil {
		return scored{}, err
	}
	return finish(ms, perSlice, maxSlices)
}

// largest returns the keys of the n largest entries of m by size, the
// largest first, ties by key.
func largest[V any](m map[string]V, size func(V) int, n int) []string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		if c := size(m[b]) - size(m[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return keys[:min(len(keys), n)]
}
