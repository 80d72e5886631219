package evaluate

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/parquet-go/parquet-go"

	"github.com/retrain-ml/retrain/activities/internal/process"
	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/npy"
	"github.com/retrain-ml/retrain/internal/trainer"
	"github.com/retrain-ml/retrain/nodetype"
)

// Files an evaluator program writes, in a folder of its own per run.
const (
	metricsFile     = "metrics.json"
	predictionsFile = "predictions.npy"
)

// runEvaluator runs the evaluator program on one model (its files in
// modelDir) and reads what it wrote. what names the model in messages.
func (a *attempt) runEvaluator(ctx context.Context, role, what, modelDir string) (scored, error) {
	dataDir, err := a.evalData(ctx)
	if err != nil {
		return scored{}, err
	}
	scratch, err := a.scratch()
	if err != nil {
		return scored{}, err
	}
	outDir := filepath.Join(scratch, "out-"+role)
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return scored{}, err
	}
	metricsPath, predsPath := filepath.Join(outDir, metricsFile), filepath.Join(outDir, predictionsFile)

	// The node's env is appended last, after the contract's, so it
	// overrides them.
	nodeEnv, err := a.e.env.Resolve(ctx, "env", a.w.Env)
	if err != nil {
		return scored{}, err
	}
	cmd, _, err := process.CommandEnv(ctx, a.in, a.w.Argv, a.w.Dir, a.e.env, nil)
	if err != nil {
		return scored{}, err
	}
	cmd.Env = append(cmd.Env,
		trainer.EnvModelDir+"="+modelDir,
		trainer.EnvEvalData+"="+dataDir,
		trainer.EnvMetricsOut+"="+metricsPath,
		trainer.EnvPredictionsOut+"="+predsPath,
		trainer.EnvModelRole+"="+role,
	)
	cmd.Env = append(cmd.Env, nodeEnv.Vars...)
	log := a.log.With("role", role)
	stdout := process.NewTailWriter(process.OutputTail, log, "stdout").Mask(nodeEnv.Secrets)
	stderr := process.NewTailWriter(process.OutputTail, log, "stderr").Mask(nodeEnv.Secrets)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	log.Info("evaluator starting", "model", what, "argv", a.w.Argv)
	if err := cmd.Start(); err != nil {
		return scored{}, nodetype.Permanent(errtype.BadInput, "start the evaluator %q: %v", a.w.Argv[0], err)
	}
	waitErr := process.WaitOrKill(ctx, cmd, log)
	stdout.Flush()
	stderr.Flush()
	if ctx.Err() != nil {
		return scored{}, ctx.Err()
	}
	// A failed run may be a passing problem (memory, a GPU, the network):
	// the attempt fails and is retried.
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		if code < 0 {
			return scored{}, fmt.Errorf("evaluator %s scoring the %s: %v; stderr: %s", a.w.Argv[0], what, waitErr, process.LastLines(stderr.Tail(), 5))
		}
		return scored{}, fmt.Errorf("evaluator %s exited with code %d scoring the %s; stderr: %s", a.w.Argv[0], code, what, process.LastLines(stderr.Tail(), 5))
	}
	s, err := a.readResults(what, metricsPath, predsPath)
	if err != nil {
		return scored{}, err
	}
	log.Info("evaluator finished", "model", what, "auc", s.metrics[MetricAUC])
	return s, nil
}

// evalData writes the rows the node scores into the scratch folder in the
// node's data format, once per attempt: the candidate's and the
// baseline's runs read the same files.
func (a *attempt) evalData(ctx context.Context) (string, error) {
	if a.dataDir != "" {
		return a.dataDir, nil
	}
	scratch, err := a.scratch()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(scratch, "data", a.w.Dataset)
	if a.data == nil {
		// An evaluator program's predictions are matched to the rows in
		// memory: this path still holds the whole dataset.
		if a.data, err = a.sd.Load(ctx, a.e.store, a.w.Dataset); err != nil {
			return "", err
		}
	}
	if a.w.DataFormat == split.FormatNPY {
		// What Localize writes, from the rows already in memory rather
		// than from a second read of the split.
		if _, err := a.data.WriteNPY(dir, a.sd.Record.Schema); err != nil {
			return "", fmt.Errorf("write the %s data as npy: %w", a.w.Dataset, err)
		}
	} else {
		if err := a.sd.Localize(ctx, a.e.store, a.w.Dataset, dir, a.w.DataFormat); err != nil {
			return "", err
		}
		order, err := a.fileOrder(dir)
		if err != nil {
			return "", err
		}
		a.fileRows = order
	}
	a.dataDir = dir
	return dir, nil
}

// requestRow reads only the request id of a split's row.
type requestRow struct {
	RequestID int64 `parquet:"request_id"`
}

// fileOrder maps the rows the node scores to the rows of the Parquet
// files in dir, read in file-name order as a program lists them:
// dataset.Load orders rows by request id (stably), the files hold them in
// the order the split wrote them. Nil when the orders agree.
func (a *attempt) fileOrder(dir string) ([]int, error) {
	if a.sd.Record.Schema.RequestID == "" {
		return nil, nil // Load keeps the files' order
	}
	entries, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return nil, err
	}
	var ids []int64
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != ".parquet" {
			continue
		}
		rows, err := parquet.ReadFile[requestRow](filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read the request ids of %s: %w", e.Name(), err)
		}
		for _, r := range rows {
			ids = append(ids, r.RequestID)
		}
	}
	order := requestOrder(ids)
	if len(order) != a.data.Len() {
		return nil, fmt.Errorf("the %s data's files hold %d rows, %d were loaded", a.w.Dataset, len(order), a.data.Len())
	}
	identity := true
	for i, j := range order {
		if a.data.RequestID[i] != ids[j] {
			return nil, fmt.Errorf("the %s data's files and the loaded rows disagree at row %d", a.w.Dataset, i)
		}
		identity = identity && i == j
	}
	if identity {
		return nil, nil
	}
	return order, nil
}

// requestOrder returns the permutation that sorts ids stably, as
// dataset.Load sorts rows: row i of the sorted rows is row order[i].
func requestOrder(ids []int64) []int {
	order := make([]int, len(ids))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(ids[a], ids[b]) })
	return order
}

// evalMetrics is an evaluator program's metrics file.
type evalMetrics struct {
	rows    int
	hasRows bool
	overall map[string]float64
	slices  map[string]map[string]float64
}

// readResults reads what the evaluator program wrote: its metrics file
// (required) and its predictions (optional). With predictions the node
// computes the standard figures itself, as for a builtin model, and adds
// the file's other overall metrics; without, the file's figures are the
// model's.
func (a *attempt) readResults(what, metricsPath, predsPath string) (scored, error) {
	m, err := a.readMetrics(what, metricsPath)
	if err != nil {
		return scored{}, err
	}
	n := a.data.Len()
	if m.hasRows && m.rows != n {
		return scored{}, nodetype.Permanent(errtype.CheckFailed,
			"node %s: the evaluator's metrics %s (%s) for the %s count %d rows, but the %s data has %d rows",
			a.in.Node, metricsPath, trainer.EnvMetricsOut, what, m.rows, a.w.Dataset, n)
	}
	preds, err := a.readPredictions(what, predsPath)
	if err != nil {
		return scored{}, err
	}
	if preds == nil {
		if !m.hasRows {
			return scored{}, nodetype.Permanent(errtype.BadInput,
				"node %s: the evaluator's metrics %s (%s) for the %s give no \"rows\" and it wrote no predictions: say how many rows it scored",
				a.in.Node, metricsPath, trainer.EnvMetricsOut, what)
		}
		s := scored{metrics: m.overall}
		s.metrics[MetricCount] = float64(n)
		if a.w.Slices && len(m.slices) > 0 {
			s.slices = map[string]map[string]float64{}
			for _, k := range largest(m.slices, func(v map[string]float64) int { return int(v[MetricCount]) }, a.w.MaxSlices) {
				s.slices[k] = m.slices[k]
			}
		}
		return s, nil
	}
	if len(preds) != n {
		return scored{}, nodetype.Permanent(errtype.CheckFailed,
			"node %s: the evaluator's predictions %s (%s) for the %s hold %d rows, but the %s data has %d rows",
			a.in.Node, predsPath, trainer.EnvPredictionsOut, what, len(preds), a.w.Dataset, n)
	}
	if a.fileRows != nil {
		inFileOrder := preds
		preds = make([]float64, n)
		for i, j := range a.fileRows {
			preds[i] = inFileOrder[j]
		}
	}
	s, err := fromPredictions(preds, a.data, a.w.Slices, a.w.MaxSlices)
	if err != nil {
		return scored{}, nodetype.Permanent(errtype.BadInput, "node %s: the evaluator's predictions %s for the %s: %v", a.in.Node, predsPath, what, err)
	}
	for k, v := range m.overall {
		if _, ok := s.metrics[k]; !ok {
			s.metrics[k] = v
		}
	}
	return s, nil
}

// readMetrics reads and checks an evaluator's metrics file: a JSON object
// with an object "overall" of numbers, optionally "rows" and "slices".
// Python's bare NaN and Infinity are read as numbers; null and
// non-numeric values are left out.
func (a *attempt) readMetrics(what, path string) (evalMetrics, error) {
	bad := func(format string, args ...any) error {
		return nodetype.Permanent(errtype.BadInput, "node %s: the evaluator's metrics %s (%s) for the %s: %s",
			a.in.Node, path, trainer.EnvMetricsOut, what, fmt.Sprintf(format, args...))
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return evalMetrics{}, bad("the evaluator wrote no metrics file")
	}
	if err != nil {
		return evalMetrics{}, bad("%v", err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(trainer.QuoteNonFinite(b), &top); err != nil || top == nil {
		return evalMetrics{}, bad("not a JSON object: want {\"rows\": N, \"overall\": {\"auc\": ...}, \"slices\": {...}}")
	}
	var m evalMetrics
	raw, ok := top["overall"]
	if !ok {
		return evalMetrics{}, bad("no \"overall\" metrics")
	}
	if m.overall, err = a.metricObject(raw); err != nil {
		return evalMetrics{}, bad("overall: %v", err)
	}
	if raw, ok := top["rows"]; ok && string(raw) != "null" {
		v, ok := number(raw)
		if !ok || v < 0 || v != math.Trunc(v) {
			return evalMetrics{}, bad("rows %s: want a count", raw)
		}
		m.rows, m.hasRows = int(v), true
	}
	if raw, ok := top["slices"]; ok && string(raw) != "null" {
		var bySlice map[string]json.RawMessage
		if err := json.Unmarshal(raw, &bySlice); err != nil {
			return evalMetrics{}, bad("slices: want an object of slice values to metrics")
		}
		m.slices = make(map[string]map[string]float64, len(bySlice))
		for k, raw := range bySlice {
			sm, err := a.metricObject(raw)
			if err != nil {
				return evalMetrics{}, bad("slice %q: %v", k, err)
			}
			// The contract's "rows" is the builtin's "count".
			if r, ok := sm["rows"]; ok {
				delete(sm, "rows")
				if _, ok := sm[MetricCount]; !ok {
					sm[MetricCount] = r
				}
			}
			m.slices[k] = sm
		}
	}
	return m, nil
}

// metricObject reads a JSON object of metric figures.
func (a *attempt) metricObject(raw json.RawMessage) (map[string]float64, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, errors.New("want an object of metric names to numbers")
	}
	out := make(map[string]float64, len(obj))
	for k, v := range obj {
		f, ok := number(v)
		if !ok {
			if string(v) != "null" {
				a.log.Warn("the evaluator's metric is not a number; left out", "metric", k, "value", string(v))
			}
			continue
		}
		out[k] = f
	}
	return out, nil
}

// number reads a JSON number or a string strconv reads as one ("NaN",
// "Infinity", "-inf", as QuoteNonFinite leaves Python's bare tokens).
func number(raw json.RawMessage) (float64, bool) {
	s := string(bytes.TrimSpace(raw))
	if len(s) > 0 && s[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, false
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil
}

// readPredictions reads the evaluator's predictions, nil if it wrote
// none: a .npy array of float32 (or float64) probabilities, [rows] or
// [rows, 1].
func (a *attempt) readPredictions(what, path string) ([]float64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	bad := func(err error) error {
		return nodetype.Permanent(errtype.BadInput, "node %s: the evaluator's predictions %s (%s) for the %s: %v",
			a.in.Node, path, trainer.EnvPredictionsOut, what, err)
	}
	if err != nil {
		return nil, bad(err)
	}
	var preds []float64
	var shape []int
	if f32, sh, err := npy.Read[float32](bytes.NewReader(b)); err == nil {
		preds, shape = make([]float64, len(f32)), sh
		for i, p := range f32 {
			preds[i] = float64(p)
		}
	} else if f64, sh, err64 := npy.Read[float64](bytes.NewReader(b)); err64 == nil {
		preds, shape = f64, sh
	} else {
		return nil, bad(fmt.Errorf("%v (want a float32 array of one probability per row)", err))
	}
	if len(shape) != 1 && (len(shape) != 2 || shape[1] != 1) {
		return nil, bad(fmt.Errorf("shape %v: want [rows]", shape))
	}
	return preds, nil
}
