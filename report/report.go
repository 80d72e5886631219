// Package report renders a pipeline run as one self-contained HTML page:
// the DAG with each node's status, node timings, the feature statistics of
// feature_stats nodes, the loss curve of train nodes and the candidate's
// metrics next to the baseline's from evaluate nodes, with the gate's
// verdict. [Collect] fetches what the nodes' outputs point at (through a
// [Fetcher]); [Write] renders it, with no I/O and no scripts or remote
// assets, so the file opens anywhere.
package report

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/retrain-ml/retrain/activities"
	"github.com/retrain-ml/retrain/colstats"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/workflows"
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
	Result *workflows.Result
	// Edges are the DAG's needs: node -> the nodes it needs. Without them
	// nodes are drawn in one row.
	Edges map[string][]string
	// Curves are the loss curves of train nodes, by node id.
	Curves map[string][]activities.CurvePoint
	// Stats are the reports of feature_stats nodes, by node id.
	Stats map[string]*colstats.Report
	// Evaluations are the metrics files of evaluate nodes, by node id.
	Evaluations map[string]*activities.EvaluationReport
	// Notes say what could not be fetched.
	Notes []string
}

// Collect gathers a run's report: the plan's edges and what the outputs of
// its train, feature_stats and evaluate nodes point at. What cannot be
// fetched is noted, never fatal: a report of a failed run is still useful.
func Collect(ctx context.Context, f Fetcher, res *workflows.Result, plan *dags.Plan) *Report {
	r := &Report{
		Result: res, Edges: map[string][]string{}, Curves: map[string][]activities.CurvePoint{},
		Stats: map[string]*colstats.Report{}, Evaluations: map[string]*activities.EvaluationReport{},
	}
	if plan != nil {
		for _, n := range plan.Nodes {
			r.Edges[n.ID] = slices.Clone(n.Needs)
		}
	}
	fetch := func(n workflows.NodeState, key string, into any) bool {
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
		if n.Status != workflows.NodeSucceeded {
			continue
		}
		switch n.Type {
		case activities.TrainType.Name:
			var c []activities.CurvePoint
			if fetch(n, "loss_curve_uri", &c) {
				r.Curves[n.ID] = c
			}
		case activities.FeatureStatsType.Name:
			var s colstats.Report
			if fetch(n, "report_uri", &s) {
				r.Stats[n.ID] = &s
			}
		case activities.EvaluateType.Name:
			var e activities.EvaluationReport
			if fetch(n, "metrics_uri", &e) {
				r.Evaluations[n.ID] = &e
			}
		}
	}
	return r
}
