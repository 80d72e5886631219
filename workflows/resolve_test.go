package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
)

const resolveSpec = `name: inline
nodes:
  - {id: a, type: step}
`

// TestResolveInlineSpecPolicy: a resolver refuses a run's own spec unless
// its worker allows them, saying why and how to allow them, while a
// pipeline from its folder resolves either way.
func TestResolveInlineSpecPolicy(t *testing.T) {
	reg, err := dags.NewRegistry(stepType)
	if err != nil {
		t.Fatal(err)
	}
	lib := dags.NewLibrary(fstest.MapFS{"inline.yaml": {Data: []byte(resolveSpec)}})
	spec, _ := json.Marshal(resolveSpec)

	refusing := &Resolver{Registry: reg, Library: lib}
	_, err = refusing.Resolve(context.Background(), ResolveInput{Spec: spec})
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != errtype.InvalidPipeline || !app.NonRetryable() {
		t.Fatalf("refused spec: err = %v, want a non-retryable InvalidPipeline", err)
	}
	for _, want := range []string{InlineSpecsRefused, "--allow-inline-specs", "RETRAIN_ALLOW_INLINE_SPECS", `{"pipeline": "NAME"}`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not say %q", err, want)
		}
	}
	var failure ResolveFailure
	if err := app.Details(&failure); err != nil || failure.Pipeline != "inline" {
		t.Errorf("details = %+v (%v), want the spec's name so the refused run is labelled", failure, err)
	}
	if out, err := refusing.Resolve(context.Background(), ResolveInput{Pipeline: "inline"}); err != nil || out.Plan == nil {
		t.Errorf("named pipeline on a refusing worker: %v", err)
	}

	allowing := &Resolver{Registry: reg, AllowInlineSpecs: true}
	if out, err := allowing.Resolve(context.Background(), ResolveInput{Spec: spec}); err != nil || out.Plan == nil {
		t.Errorf("inline spec on an allowing worker: %v", err)
	}
}

// TestResolveNamesDisagreement: where other workers of the queue differ
// in the field a refusal depends on, the refusal names this worker and
// them; where none does, the message is the single worker's.
func TestResolveNamesDisagreement(t *testing.T) {
	reg, err := dags.NewRegistry(stepType)
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := json.Marshal(resolveSpec)
	asked := map[string]int{}
	r := &Resolver{Registry: reg, Library: dags.NewLibrary(fstest.MapFS{}), Worker: "7@hostB@retrain", Disagreement: func(field string) string {
		asked[field]++
		return "clause about " + field
	}}
	_, err = r.Resolve(context.Background(), ResolveInput{Spec: spec})
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != errtype.InvalidPipeline || !app.NonRetryable() {
		t.Fatalf("refused spec: err = %v, want a non-retryable InvalidPipeline", err)
	}
	for _, want := range []string{"worker 7@hostB@retrain refused the inline spec: " + InlineSpecsRefused, "clause about " + PolicyInlineSpecs,
		"--allow-inline-specs", `{"pipeline": "NAME"}`} {
		if !strings.Contains(app.Message(), want) {
			t.Errorf("message %q does not say %q", app.Message(), want)
		}
	}
	_, err = r.Resolve(context.Background(), ResolveInput{Pipeline: "nightly"})
	if !errors.As(err, &app) || !strings.Contains(app.Message(), "worker 7@hostB@retrain: pipeline \"nightly\"") ||
		!strings.Contains(app.Message(), "clause about "+PolicyPipelines) {
		t.Errorf("unknown pipeline: %v", err)
	}
	if asked[PolicyInlineSpecs] != 1 || asked[PolicyPipelines] != 1 {
		t.Errorf("fields asked about: %v", asked)
	}
	// Nobody disagrees: the single worker's message, unchanged.
	r.Disagreement = func(string) string { return "" }
	_, err = r.Resolve(context.Background(), ResolveInput{Spec: spec})
	if !errors.As(err, &app) || !strings.HasPrefix(app.Message(), InlineSpecsRefused) {
		t.Errorf("alone: %v", err)
	}
}
