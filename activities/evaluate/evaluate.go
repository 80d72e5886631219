package evaluate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"github.com/retrain-ml/retrain/activities/internal/objects"
	modelsnode "github.com/retrain-ml/retrain/activities/models"
	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/activities/train"

	"github.com/retrain-ml/retrain/activities/internal/process"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/dataset"
	"github.com/retrain-ml/retrain/internal/gate"
	"github.com/retrain-ml/retrain/internal/models"
	figures "github.com/retrain-ml/retrain/internal/number" // this package has a func number
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

	// Models of other trainers are scored by a program of the user's (the
	// evaluator contract: internal/trainer's Env* names).
	Evaluator  string            `json:"evaluator" default:"builtin" doc:"builtin or command; command says the candidate is another trainer's model and needs argv. Under both, a model folder holding the builtin trainer's model.bin is scored by the builtin scorer and any other model (candidate or baseline) by argv"`
	Argv       []string          `json:"argv" doc:"the evaluator program and its arguments (no shell unless argv names one), run once per model that is not the builtin trainer's, with RETRAIN_MODEL_DIR, RETRAIN_EVAL_DATA, RETRAIN_METRICS_OUT, RETRAIN_PREDICTIONS_OUT and RETRAIN_MODEL_ROLE (candidate or baseline); taken with evaluator builtin too, to score a baseline of another trainer"`
	Env        map[string]string `json:"env" doc:"extra environment of the evaluator program (the worker's own is not inherited beyond PATH, HOME, locale and --pass-env); values may hold ${secret.NAME}"`
	Dir        string            `json:"dir" doc:"working directory of the evaluator program"`
	DataFormat string            `json:"data_format" default:"parquet" doc:"how RETRAIN_EVAL_DATA holds the rows to score: parquet (the split's files; predictions follow their rows in file-name order) or npy (NumPy arrays and schema.json; predictions follow the arrays' rows)"`
}

// Evaluators an evaluate node's `evaluator` names.
const (
	BuiltinEvaluator = "builtin"
	CommandEvaluator = "command"
)

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
	// BaselineLogicalDate is the date of the data the baseline was
	// trained for, as the registry recorded it ("" when unknown).
	BaselineLogicalDate string     `json:"baseline_logical_date,omitempty"`
	CandidateID         string     `json:"candidate_id"`
	CandidateData       *EvalScope `json:"candidate_data"`
	BaselineData        *EvalScope `json:"baseline_data"` // null without a baseline
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
	switch w.Evaluator {
	case BuiltinEvaluator:
	case CommandEvaluator:
		if len(w.Argv) == 0 {
			return errors.New("evaluator command needs argv: the evaluator program and its arguments")
		}
	default:
		return fmt.Errorf("evaluator %q: want builtin or command", w.Evaluator)
	}
	if w.Argv != nil && (len(w.Argv) == 0 || w.Argv[0] == "") {
		return errors.New("argv must name a program")
	}
	if w.DataFormat != split.FormatParquet && w.DataFormat != split.FormatNPY {
		return fmt.Errorf("data_format %q: want parquet or npy", w.DataFormat)
	}
	return nil
}

// checkEvaluate checks the values of a spec's `with` block that the schema
// cannot: names, the dataset, the slice count, the evaluator and its argv,
// the data format. Values holding ${...} are only known at run time, when
// With.check and the registry check them.
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
	if e, ok := with["evaluator"].(string); ok && !dags.HasRef(e) {
		switch e {
		case BuiltinEvaluator:
		case CommandEvaluator:
			if argv, ok := with["argv"]; !ok || argv == nil {
				return errors.New("evaluator command needs argv: the evaluator program and its arguments")
			}
		default:
			return fmt.Errorf("evaluator %q: want builtin or command", e)
		}
	}
	if argv, ok := with["argv"].([]any); ok && (len(argv) == 0 || argv[0] == "") {
		return errors.New("argv must name a program")
	}
	if f, ok := with["data_format"].(string); ok && !dags.HasRef(f) && f != split.FormatParquet && f != split.FormatNPY {
		return fmt.Errorf("data_format %q: want parquet or npy", f)
	}
	return nil
}

// evaluateMetrics says which metrics an evaluate node's evaluation (and
// its candidate and baseline maps) hold, for the validator to check a
// gate's metric names against: the builtin scorer's, unless the node runs
// an evaluator program, whose metrics file may add any (then unknown).
func evaluateMetrics(output string, with map[string]any) ([]string, bool) {
	switch output {
	case "evaluation", "candidate", "baseline":
	default:
		return nil, false
	}
	if _, ok := with["argv"]; ok {
		return nil, false
	}
	if e, ok := with["evaluator"]; ok && e != BuiltinEvaluator {
		return nil, false
	}
	return slices.Sorted(maps.Keys(metricMap(trainer.Metrics{}))), true
}

// evaluator runs evaluate nodes.
type evaluator struct {
	store  *s3store.Store
	logger *slog.Logger
	// allowCommands are the programs this worker's operator lets an
	// evaluator start (its --allow-commands); empty allows any.
	allowCommands []string
	// env is what evaluator programs see of the worker: its environment
	// and secrets.
	env progenv.Policy
}

// Deps are what the evaluate node type needs from its worker.
type Deps struct {
	Store         *s3store.Store
	Logger        *slog.Logger
	AllowCommands []string       // programs an evaluator may start; empty: any
	Env           progenv.Policy // what evaluator programs see of the worker
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

// run runs an evaluate node.
func (e *evaluator) run(ctx context.Context, in nodetype.Input, w With) (Outputs, error) {
	if err := w.check(); err != nil {
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	if e.store == nil {
		return Outputs{}, objects.NoStore()
	}
	if len(w.Argv) > 0 { // before any data moves
		if err := process.CheckProgram(e.allowCommands, w.Argv); err != nil {
			return Outputs{}, err
		}
	}
	log := e.logger.With("pipeline", in.Pipeline, "run", in.RunID, "node", in.Node)
	sd, err := split.Open(ctx, e.store, w.Data)
	if err != nil {
		return Outputs{}, err
	}
	// The rows are streamed, per model, by the builtin scorer; only an
	// evaluator program's path loads them (see attempt.evalData).
	rows := int(sd.Rows(w.Dataset))
	scope, err := evalScope(sd, w.Data, w.Dataset, rows)
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

	a := &attempt{e: e, in: in, w: w, log: log, sd: sd}
	defer a.cleanup()

	// The candidate.
	c, candidateID, err := a.scoreCandidate(ctx)
	if err != nil {
		return Outputs{}, err
	}
	report := EvaluationReport{
		Data: w.Data, Dataset: w.Dataset, Rows: rows, Window: scope.Window, Dates: scope.Dates, RunWindow: sd.Record.Window,
		CandidateID: candidateID, SliceColumn: sliceCol, Candidate: c.modelMetrics(),
	}

	// The baseline, if the registry has one.
	var base *scored
	var baselineVersion, baselineDate string
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
			b, err := a.scoreBaseline(ctx, reg, v)
			if err != nil {
				return Outputs{}, err
			}
			base, baselineVersion, baselineDate = &b, v.Version, v.LogicalDate()
			report.BaselineVersion = v.Version
			bm := b.modelMetrics()
			report.Baseline = &bm
		}
	}

	metricsKey := fmt.Sprintf("runs/%s/%s/%s/metrics.json", in.Pipeline, in.RunID, in.Node)
	if err := objects.PutJSON(ctx, e.store, metricsKey, report); err != nil {
		return Outputs{}, fmt.Errorf("write the metrics: %w", err)
	}
	candMetrics := outputMetrics(c.metrics)
	out := Outputs{
		Evaluation: Evaluation{
			Candidate: candMetrics, BaselineVersion: baselineVersion, BaselineLogicalDate: baselineDate,
			CandidateID: candidateID, CandidateData: &scope,
		},
		Candidate: candMetrics, BaselineVersion: baselineVersion, CandidateID: candidateID, HasBaseline: base != nil,
		MetricsURI: objects.KeyURI(e.store, metricsKey), Rows: rows, Window: scope.Window, Dates: scope.Dates,
		Summary: evalSummary(scope, c.metrics[MetricAUC], baselineVersion, base),
		AUC:     train.FiniteOrNil(c.metrics[MetricAUC]), LogLoss: train.FiniteOrNil(c.metrics[MetricLogLoss]),
		Accuracy: train.FiniteOrNil(c.metrics[MetricAccuracy]), Calibration: train.FiniteOrNil(c.metrics[MetricCalibration]),
	}
	if base != nil {
		out.Baseline = outputMetrics(base.metrics)
		out.Evaluation.Baseline, out.Evaluation.BaselineData = out.Baseline, &scope
	}
	log.Info("evaluated", "window", scope.Window.String(), "rows", rows, "candidate_auc", c.metrics[MetricAUC], "baseline", baselineVersion)
	return out, nil
}

// evalSummary says in one line what was scored on which rows.
func evalSummary(scope EvalScope, auc float64, baselineVersion string, base *scored) string {
	s := fmt.Sprintf("%s %s rows (%s): candidate AUC %.4f", figures.Count(scope.Rows), scope.Dataset, scope.Window, auc)
	if base != nil {
		return s + fmt.Sprintf(", baseline %s AUC %.4f", baselineVersion, base.metrics[MetricAUC])
	}
	return s + ", no baseline"
}

// Type returns the evaluate node type.
func Type(store *s3store.Store, logger *slog.Logger) nodetype.Type {
	return TypeWith(Deps{Store: store, Logger: logger})
}

// TypeWith returns the evaluate node type with a worker's deps.
func TypeWith(d Deps) nodetype.Type {
	e := &evaluator{store: d.Store, logger: d.Logger, allowCommands: d.AllowCommands, env: d.Env}
	return nodetype.New(dags.NodeType{
		Name: Name,
		Doc: "Score a candidate model and the model behind an alias of the registry (production: the baseline) on the held-out split: " +
			"AUC, log loss, accuracy, calibration (mean prediction / mean label), optionally per slice. A model of the builtin trainer (model.bin) is " +
			"scored by the builtin scorer; any other by the evaluator program argv, which writes a metrics JSON and may write predictions.npy " +
			"(then the node computes the figures itself, as for a builtin model, so both compare like with like). Writes the metrics as JSON to the object " +
			"store; outputs the candidate's headline figures (auc, log_loss, accuracy, calibration), the baseline's version and ${nodes.ID.outputs.evaluation} for a gate node.",
		Check:   checkEvaluate,
		Metrics: evaluateMetrics,
	}, e.run)
}
