package dags

import (
	"fmt"
	"slices"
	"strings"
)

// RunValues are the values ${run.NAME} gives: facts about the run, fixed
// when it starts (the workflow computes them from its start event, so
// replay gives the same).
type RunValues struct {
	ID          string // ${run.id}: the run id (the workflow id)
	Pipeline    string // ${run.pipeline}: the pipeline's name
	LogicalTime string // ${run.logical_time}: the time the run is for, RFC 3339
	LogicalDate string // ${run.logical_date}: its date, YYYY-MM-DD, in the run's time zone
}

// RunValueNames are the names ${run.NAME} takes, in documentation order.
var RunValueNames = []string{"id", "pipeline", "logical_time", "logical_date"}

func (rv *RunValues) lookup(r Ref) (any, error) {
	if rv == nil {
		return nil, fmt.Errorf("%s: run values are not known here", r)
	}
	switch r.Name {
	case "id":
		return rv.ID, nil
	case "pipeline":
		return rv.Pipeline, nil
	case "logical_time":
		return rv.LogicalTime, nil
	case "logical_date":
		return rv.LogicalDate, nil
	}
	return nil, fmt.Errorf("%s: no run value %q; run values are %s", r, r.Name, strings.Join(RunValueNames, ", "))
}

// runRef checks a ${run.NAME} reference at validation time.
func (v *validator) runRef(n *Node, onFailure bool, r Ref, pos Pos) {
	if !slices.Contains(RunValueNames, r.Name) {
		v.at(pos, "%s references run.%s, which is not a run value%s; run values are %s",
			nodeName(n, onFailure), r.Name, didYouMean(r.Name, RunValueNames), strings.Join(RunValueNames, ", "))
	}
}
