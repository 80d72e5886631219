package evaluate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/retrain-ml/retrain/nodes/internal/objects"
	modelsnode "github.com/retrain-ml/retrain/nodes/models"
	"github.com/retrain-ml/retrain/nodes/split"
	"github.com/retrain-ml/retrain/nodes/train"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/dataset"
	"github.com/retrain-ml/retrain/internal/gate"
	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/internal/trainer"
	"github.com/retrain-ml/retrain/nodetype"
)

// Name is the evaluate node type's name.
const Name = "evaluate"

// EvaluateType is the `evaluate` node type's declaration (its name, fields
// and outputs), for code that names the type.
var EvaluateType = Type(nil, nil).NodeType

// With is an evaluate node's `with` block.
type With struct {
	Candidate string `json:"candidate" required:"true" doc:"the candidate's folder, ${nodes.train.outputs.model_uri}"`
	Data      string `json:"data" required:"true" doc:"the split, ${nodes.split.outputs.uri}"`
	Dataset   string `json:"dataset" default:"eval" doc:"dataset of the split to score: eval or train"`
	Model     string `json:"model" doc:"registry model whose alias is the baseline (no model: no baseline)"`
	Baseline  string `json:"baseline" default:"production" doc:"alias or version of the baseline"`
	Slices    bool   `json:"slices" doc:"also score each value of the split's slice column"`
	MaxSlices int    `json:"max_slices" default:"20" doc:"keep the largest N slices"`
}

// Evaluation is what a gate node reads: both models' headline figures and
// the rows each was scored on. Both were scored on the same rows here; the
// gate checks that the two records agree, so metrics from two evaluations
// of different data are never compared.
type Evaluation struct {
	// Candidate and Baseline map a metric to its figure, null where it is
	// not finite (an AUC on one class); Baseline is null without one.
	Candidate       map[string]any `json:"candidate"`
	Baseline        map[string]any `json:"baseline"`
	BaselineVersion string         `json:"baseline_version"`
	CandidateID     string         `json:"candidate_id"`
	CandidateData   *EvalScope     `json:"candidate_data"`
	BaselineData    *EvalScope     `json:"baseline_data"` // null without a baseline
}

// Outputs are an evaluate node's outputs.
type Outputs struct {
	Evaluation      Evaluation     `json:"evaluation"`
	Candidate       map[string]any `json:"candidate"`
	Baseline        map[string]any `json:"baseline"`
	BaselineVersion string         `json:"baseline_version"`
	CandidateID     string         `json:"candidate_id"`
	HasBaseline     bool           `json:"has_baseline"`
	MetricsURI      string         `json:"metrics_uri"`
	Rows            int            `json:"rows"`
	Window          dataset.Window `json:"window"`
	Dates           []string       `json:"dates"`
	Summary         string         `json:"summary"`
	// The candidate's headline figures, for a deploy's metrics: null where
	// not finite.
	AUC         any `json:"auc"`
	LogLoss     any `json:"log_loss"`
	Accuracy    any `json:"accuracy"`
	Calibration any `json:"calibration"`
}

// check refuses the `with` values that only a reference can bring past the
// validator's Check: Check does not run on values resolved at run time.
func (w With) check() error {
	if w.Dataset != split.TrainDataset && w.Dataset != split.EvalDataset {
		return fmt.Errorf("dataset %q: want eval or train", w.Dataset)
	}
	if w.MaxSlices < 1 {
		return fmt.Errorf("max_slices must be at least 1, got %d", w.MaxSlices)
	}
	return nil
}

// checkEvaluate checks the values of a spec's `with` block that the schema
// cannot: names, the dataset and the slice count. Values holding ${...}
// are only known at run time, when With.check and the registry check them.
func checkEvaluate(with map[string]any) error {
	if err := modelsnode.CheckNames(with, "model"); err != nil {
		return err
	}
	if s, ok := with["baseline"].(string); ok && !dags.HasRef(s) {
		if err := models.ValidateName("baseline", s); err != nil {
			return err
		}
	}
	if d, ok := with["dataset"].(string); ok && !dags.HasRef(d) && d != split.TrainDataset && d != split.EvalDataset {
		return fmt.Errorf("dataset %q: want eval or train", d)
	}
	if n, ok := with["max_slices"].(float64); ok && n < 1 {
		return fmt.Errorf("max_slices must be at least 1, got %v", n)
	}
	return nil
}

// evaluator runs evaluate nodes.
type evaluator struct {
	store  *s3store.Store
	logger *slog.Logger
}

// ModelMetrics is one model's figures on the held-out data, as written to
// the metrics file. NaN (an AUC on one class) is written as "NaN".
type ModelMetrics struct {
	Overall map[string]gate.Number            `json:"overall"`
	Slices  map[string]map[string]gate.Number `json:"slices,omitempty"`
	// ROC is the model's ROC curve on all the rows scored (at most
	// trainer.DefaultROCPoints points; none on a single class) and
	// CalibrationBins its reliability diagram, for the run report.
	ROC             []trainer.ROCPoint       `json:"roc,omitempty"`
	CalibrationBins []trainer.CalibrationBin `json:"calibration_bins,omitempty"`
}

// EvaluationReport is the metrics file an evaluate node writes.
type EvaluationReport struct {
	Data    string `json:"data"`
	Dataset string `json:"dataset"`
	Rows    int    `json:"rows"`
	// Window is the date range of the rows scored, Dates the dates they
	// hold; RunWindow is the split's (the run's) window.
	Window          dataset.Window `json:"window"`
	Dates           []string       `json:"dates"`
	RunWindow       dataset.Window `json:"run_window"`
	CandidateID     string         `json:"candidate_id"`
	Candidate       ModelMetrics   `json:"candidate"`
	BaselineVersion string         `json:"baseline_version,omitempty"`
	Baseline        *ModelMetrics  `json:"baseline,omitempty"`
	SliceColumn     string         `json:"slice_column,omitempty"`
}

// Headline metric names, as the gate reads them.
const (
	MetricAUC         = "auc"
	MetricLogLoss     = "log_loss"
	MetricAccuracy    = "accuracy"
	MetricCalibration = "calibration"
)

func metricMap(m trainer.Metrics) map[string]float64 {
	return map[string]float64{
		MetricAUC: m.AUC, MetricLogLoss: m.LogLoss, MetricAccuracy: m.Accuracy, MetricCalibration: m.Calibration,
		"mean_prediction": m.MeanPrediction, "mean_label": m.MeanLabel, "count": float64(m.Count),
	}
}

func numbers(m map[string]float64) map[string]gate.Number {
	out := make(map[string]gate.Number, len(m))
	for k, v := range m {
		out[k] = gate.Number(v)
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

// run runs an evaluate node.
func (e *evaluator) run(ctx context.Context, in nodetype.Input, w With) (Outputs, error) {
	if err := w.check(); err != nil {
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	if e.store == nil {
		return Outputs{}, objects.NoStore()
	}
	log := e.logger.With("pipeline", in.Pipeline, "run", in.RunID, "node", in.Node)
	sd, err := split.Open(ctx, e.store, w.Data)
	if err != nil {
		return Outputs{}, err
	}
	data, err := sd.Load(ctx, e.store, w.Dataset)
	if err != nil {
		return Outputs{}, err
	}
	scope, err := evalScope(sd, w.Data, w.Dataset, data.Len())
	if err != nil {
		return Outputs{}, err
	}
	sliceCol := ""
	if w.Slices {
		if sd.Record.Schema.Slice == "" {
			return Outputs{}, nodetype.Permanent(errtype.BadInput, "slices: the split has no slice column (give the split node `slice`)")
		}
		sliceCol = sd.Record.Schema.Slice
	}

	// The candidate.
	candKey, err := objects.StoreKey(e.store, w.Candidate)
	if err != nil {
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "candidate: %v", err)
	}
	candKey = strings.TrimSuffix(candKey, "/") + "/" + train.ModelFile
	raw, err := objects.ReadObject(ctx, e.store, candKey)
	if err != nil {
		return Outputs{}, objects.StoreError(fmt.Sprintf("candidate: read %s (evaluate scores models of the builtin trainer)", objects.KeyURI(e.store, candKey)), err)
	}
	cand, err := trainer.ReadModel(bytes.NewReader(raw))
	if err != nil {
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "candidate %s: %v", objects.KeyURI(e.store, candKey), err)
	}
	sum := sha256.Sum256(raw)
	candidateID := "sha256:" + hex.EncodeToString(sum[:8])
	c, err := score(cand, data, w.Slices, w.MaxSlices)
	if err != nil {
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "candidate: %v", err)
	}
	report := EvaluationReport{
		Data: w.Data, Dataset: w.Dataset, Rows: data.Len(), Window: scope.Window, Dates: scope.Dates, RunWindow: sd.Record.Window,
		CandidateID: candidateID, SliceColumn: sliceCol,
		Candidate: ModelMetrics{Overall: numbers(c.metrics), Slices: sliceNumbers(c.slices), ROC: c.roc, CalibrationBins: c.calibration},
	}

	// The baseline, if the registry has one.
	var base *scored
	var baselineVersion string
	if w.Model != "" {
		reg := models.New(e.store)
		v, err := reg.Resolve(ctx, w.Model+"@"+w.Baseline)
		switch {
		case errors.Is(err, models.ErrNotFound):
			log.Info("no baseline: the registry has none yet", "model", w.Model, "alias", w.Baseline)
		case errors.Is(err, models.ErrInvalidName):
			return Outputs{}, nodetype.Permanent(errtype.BadInput, "%v", err)
		case err != nil:
			return Outputs{}, fmt.Errorf("baseline %s@%s: %w", w.Model, w.Baseline, err)
		default:
			bm, err := openVersionModel(ctx, reg, v)
			if err != nil {
				return Outputs{}, err
			}
			b, err := score(bm, data, w.Slices, w.MaxSlices)
			if err != nil {
				return Outputs{}, nodetype.Permanent(errtype.BadInput, "baseline %s cannot score this data: %v", v.Ref(), err)
			}
			base, baselineVersion = &b, v.Version
			report.BaselineVersion = v.Version
			report.Baseline = &ModelMetrics{Overall: numbers(b.metrics), Slices: sliceNumbers(b.slices), ROC: b.roc, CalibrationBins: b.calibration}
		}
	}

	metricsKey := fmt.Sprintf("runs/%s/%s/%s/metrics.json", in.Pipeline, in.RunID, in.Node)
	if err := objects.PutJSON(ctx, e.store, metricsKey, report); err != nil {
		return Outputs{}, fmt.Errorf("write the metrics: %w", err)
	}
	candMetrics := outputMetrics(c.metrics)
	out := Outputs{
		Evaluation: Evaluation{
			Candidate: candMetrics, BaselineVersion: baselineVersion, CandidateID: candidateID, CandidateData: &scope,
		},
		Candidate: candMetrics, BaselineVersion: baselineVersion, CandidateID: candidateID, HasBaseline: base != nil,
		MetricsURI: objects.KeyURI(e.store, metricsKey), Rows: data.Len(), Window: scope.Window, Dates: scope.Dates,
		Summary: evalSummary(scope, c.metrics[MetricAUC], baselineVersion, base),
		AUC:     train.FiniteOrNil(c.metrics[MetricAUC]), LogLoss: train.FiniteOrNil(c.metrics[MetricLogLoss]),
		Accuracy: train.FiniteOrNil(c.metrics[MetricAccuracy]), Calibration: train.FiniteOrNil(c.metrics[MetricCalibration]),
	}
	if base != nil {
		out.Baseline = outputMetrics(base.metrics)
		out.Evaluation.Baseline, out.Evaluation.BaselineData = out.Baseline, &scope
	}
	log.Info("evaluated", "window", scope.Window.String(), "rows", data.Len(), "candidate_auc", c.metrics[MetricAUC], "baseline", baselineVersion)
	return out, nil
}

// openVersionModel reads the builtin model of a registered version.
func openVersionModel(ctx context.Context, reg *models.Registry, v models.Version) (*trainer.Model, error) {
	has := slices.ContainsFunc(v.Files, func(a models.Artifact) bool { return a.Path == train.ModelFile })
	if !has {
		return nil, nodetype.Permanent(errtype.BadInput, "baseline %s has no %s: evaluate can only score models of the builtin trainer", v.Ref(), train.ModelFile)
	}
	body, err := reg.Open(ctx, v, train.ModelFile)
	if err != nil {
		return nil, fmt.Errorf("baseline %s: %w", v.Ref(), err)
	}
	defer body.Close()
	m, err := trainer.ReadModel(body)
	if err != nil {
		return nil, nodetype.Permanent(errtype.BadInput, "baseline %s: %v", v.Ref(), err)
	}
	return m, nil
}

// score computes a model's metrics on the data, overall and per slice
// (the maxSlices largest).
func score(m *trainer.Model, d *dataset.Data, perSlice bool, maxSlices int) (scored, error) {
	cfg := m.Config()
	exs, err := d.Examples(cfg.Dense, cfg.Sparse)
	if err != nil {
		return scored{}, err
	}
	preds := m.PredictBatch(exs, nil)
	overall, err := trainer.Evaluate(preds, d.Label)
	if err != nil {
		return scored{}, err
	}
	s := scored{metrics: metricMap(overall),
		roc:         trainer.ROC(preds, d.Label, trainer.DefaultROCPoints),
		calibration: trainer.CalibrationBins(preds, d.Label, trainer.DefaultCalibrationBins)}
	if perSlice && d.Slice != nil {
		bySlice, err := trainer.EvaluateSlices(preds, d.Label, d.Slice)
		if err != nil {
			return scored{}, err
		}
		keys := slices.Collect(maps.Keys(bySlice))
		slices.SortFunc(keys, func(a, b string) int {
			if c := bySlice[b].Count - bySlice[a].Count; c != 0 {
				return c
			}
			return strings.Compare(a, b)
		})
		s.slices = map[string]map[string]float64{}
		for _, k := range keys[:min(len(keys), maxSlices)] {
			s.slices[k] = metricMap(bySlice[k])
		}
	}
	return s, nil
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

// evalSummary says in one line what was scored on which rows.
func evalSummary(scope EvalScope, auc float64, baselineVersion string, base *scored) string {
	s := fmt.Sprintf("%d %s rows (%s): candidate AUC %.4f", scope.Rows, scope.Dataset, scope.Window, auc)
	if base != nil {
		return s + fmt.Sprintf(", baseline %s AUC %.4f", baselineVersion, base.metrics[MetricAUC])
	}
	return s + ", no baseline"
}

// Type returns the evaluate node type.
func Type(store *s3store.Store, logger *slog.Logger) nodetype.Type {
	e := &evaluator{store: store, logger: logger}
	return nodetype.New(dags.NodeType{
		Name: Name,
		Doc: "Score a candidate model and the model behind an alias of the registry (production: the baseline) on the held-out split: " +
			"AUC, log loss, accuracy, calibration (mean prediction / mean label), optionally per slice. Writes the metrics as JSON to the object " +
			"store; outputs the candidate's headline figures (auc, log_loss, accuracy, calibration), the baseline's version and ${nodes.ID.outputs.evaluation} for a gate node.",
		Check: checkEvaluate,
	}, e.run)
}
