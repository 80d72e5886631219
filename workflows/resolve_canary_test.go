package workflows

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"go.temporal.io/sdk/temporal"

	canarynode "github.com/retrain-ml/retrain/activities/canary"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
)

const canaryParamsSpec = `name: ship
params:
  last: {type: number, default: 100}
nodes:
  - id: canary
    type: canary
    with:
      model: ctr
      version: v2
      prometheus_url: http://prometheus:9090
      steps:
        - {percent: 10, bake: 30m}
        - {percent: "${params.last}"}
      checks:
        - {name: p99, query: 'latency{version="$${version}"}', max: 0.25}
`

// TestResolveChecksCanaryWithTheRunsParams: a run whose params make its
// canary's steps unusable fails when it starts, at the step's line,
// before any node runs; the defaults resolve.
func TestResolveChecksCanaryWithTheRunsParams(t *testing.T) {
	reg, err := dags.NewRegistry(canarynode.NodeType)
	if err != nil {
		t.Fatal(err)
	}
	r := &Resolver{Registry: reg, Library: dags.NewLibrary(fstest.MapFS{"ship.yaml": {Data: []byte(canaryParamsSpec)}})}
	if _, err := r.Resolve(context.Background(), ResolveInput{Pipeline: "ship"}); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	_, err = r.Resolve(context.Background(), ResolveInput{Pipeline: "ship", Params: map[string]any{"last": 90}})
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != errtype.InvalidPipeline || !app.NonRetryable() {
		t.Fatalf("last=90: err = %v, want a non-retryable InvalidPipeline", err)
	}
	want := `ship.yaml:13:12: node "canary" (type canary): steps[1].percent: the last step's percent is 90; it must be 100 (where the canary is promoted) (checked with params last as given for this run)`
	if !strings.Contains(err.Error(), want) || strings.Count(err.Error(), "percent is 90") != 1 {
		t.Fatalf("got %v\nwant %s, once", err, want)
	}
}
