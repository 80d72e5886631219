// Package report renders a pipeline run as one self-contained HTML page:
// at the top what was deployed (or why nothing was) and links to the run
// in the Temporal Web UI, the feature statistics pages and the model
// version; then the data the split node read (date windows, row counts,
// per-feature null rates of the rows trained on), the candidate's metrics,
// ROC curve and reliability diagram next to the baseline's, the gate's
// verdict as the candidate's lift over the baseline (per metric and per
// slice, with both ROC curves), the DAG with each node's status, node timings, the feature
// statistics of feature_stats nodes and the loss curve of train nodes.
// [Collect] fetches what the nodes' outputs point at (through a
// [Fetcher]); [Write] renders it, with no I/O and no scripts or remote
// assets, so the file opens anywhere.
package report

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/retrain-ml/retrain/activities/evaluate"
	lakenode "github.com/retrain-ml/retrain/activities/lake"
	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/activities/train"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/internal/colstats"
	"github.com/retrain-ml/retrain/internal/dataset"
	"github.com/retrain-ml/retrain/runs"
)

// A Fetcher reads the object a node's output URI names.
type Fetcher interface {
	Fetch(ctx context.Context, uri string) ([]byte, error)
}

// FetchFunc adapts a function to a Fetcher.
type FetchFunc func(ctx context.Context, uri string) ([]byte, error)

// Fetch implements Fetcher.
func (f FetchFunc) Fetch(ctx context.Context, uri string) ([]byte, error) { return f(ctx, uri) }

// LocalFiles fetches file:// URIs and plain paths, and passes anything
// else to next (nil: an error).
func LocalFiles(next Fetcher) Fetcher {
	return FetchFunc(func(ctx context.Context, uri string) ([]byte, error) {
		if p, ok := strings.CutPrefix(uri, "file://"); ok {
			return os.ReadFile(p)
		}
		if !strings.Contains(uri, "://") {
			return os.ReadFile(uri)
		}
		if next == nil {
			return nil, errors.New("no way to read " + uri)
		}
		return next.Fetch(ctx, uri)
	})
}

// Report is what the page shows.
type Report struct {
	Result *runs.Result
	// Edges are the plan's needs. Without them (no plan) nodes are drawn
	// in one column.
	Edges dags.Edges
	// Curves are the loss curves of train nodes, by node id.
	Curves map[string][]train.CurvePoint
	// Stats are the reports of feature_stats nodes, by node id.
	Stats map[string]*colstats.Report
	// Evaluations are the metrics files of evaluate nodes, by node id.
	Evaluations map[string]*evaluate.EvaluationReport
	// Splits are what split nodes say about the rows they wrote, by node id.
	Splits map[string]*Split
	// Lifts are the gates' verdicts as the candidate's lift over the
	// baseline, with the evaluations they came from, by gate node id.
	Lifts map[string]*Lift
	// Notes say what could not be fetched.
	Notes []string
}

// Split is what a split node's outputs say about the data of the run:
// its window, which dates were trained on and which held out, and the
// null rate of each feature on each side.
type Split struct {
	Window     dataset.Window    `json:"window"`
	TrainDates []string          `json:"train_dates"`
	EvalDates  []string          `json:"eval_dates"`
	TrainRows  int64             `json:"train_rows"`
	EvalRows   int64             `json:"eval_rows"`
	Coverage   []FeatureCoverage `json:"coverage"`
	Reused     bool              `json:"reused"`
}

// FeatureCoverage is one feature's null rates in a split; MaxNullRate is
// the limit it was checked against, nil when the split names none.
type FeatureCoverage struct {
	Feature       string   `json:"feature"`
	Kind          string   `json:"kind"`
	TrainNullRate float64  `json:"train_null_rate"`
	EvalNullRate  float64  `json:"eval_null_rate"`
	MaxNullRate   *float64 `json:"max_null_rate"`
}

// Options are where the page's links point. The caller works them out
// (copying a stats page next to the report, asking Temporal for the run's
// execution), so that Write does no I/O.
type Options struct {
	// UIBase is the Temporal Web UI's base URL, e.g.
	// http://localhost:8233; "" leaves the run unlinked.
	UIBase    string
	Namespace string
	// TemporalRunID is the workflow execution's run id. Without it the
	// link opens the UI's list of the workflow id's executions.
	TemporalRunID string
	// StatsPages are the links to feature_stats nodes' HTML pages, by
	// node id (e.g. a copy next to the report file). A node missing here
	// shows its html_uri as text.
	StatsPages map[string]string
}

// Collect gathers a run's report: the plan's edges and what the outputs of
// its train, feature_stats and evaluate nodes point at. What cannot be
// fetched is noted, never fatal: a report of a failed run is still useful.
func Collect(ctx context.Context, f Fetcher, res *runs.Result, plan *dags.Plan) *Report {
	r := &Report{
		Result: res, Curves: map[string][]train.CurvePoint{},
		Stats: map[string]*colstats.Report{}, Evaluations: map[string]*evaluate.EvaluationReport{},
		Splits: map[string]*Split{},
	}
	if plan != nil {
		r.Edges = plan.Edges()
	}
	fetch := func(n runs.NodeState, key string, into any) bool {
		uri, _ := n.Outputs[key].(string)
		if uri == "" {
			return false
		}
		b, err := f.Fetch(ctx, uri)
		if err == nil {
			err = json.Unmarshal(b, into)
		}
		if err != nil {
			r.Notes = append(r.Notes, fmt.Sprintf("%s: cannot read %s: %v", n.ID, uri, err))
			return false
		}
		return true
	}
	for _, n := range res.Nodes {
		if n.Status != runs.NodeSucceeded {
			continue
		}
		switch n.Type {
		case train.TrainType.Name:
			var c []train.CurvePoint
			if fetch(n, "loss_curve_uri", &c) {
				r.Curves[n.ID] = c
			}
		case lakenode.FeatureStatsType.Name:
			var s colstats.Report
			if fetch(n, "report_uri", &s) {
				r.Stats[n.ID] = &s
			}
		case evaluate.EvaluateType.Name:
			var e evaluate.EvaluationReport
			if fetch(n, "metrics_uri", &e) {
				r.Evaluations[n.ID] = &e
			}
		case split.SplitType.Name:
			// Outputs come back from history as generic JSON.
			var s Split
			b, err := json.Marshal(n.Outputs)
			if err == nil {
				err = json.Unmarshal(b, &s)
			}
			if err != nil {
				r.Notes = append(r.Notes, fmt.Sprintf("%s: cannot read its outputs: %v", n.ID, err))
				continue
			}
			r.Splits[n.ID] = &s
		}
	}
	r.Lifts = collectLifts(r, plan) // after the evaluations it draws on
	return r
}
