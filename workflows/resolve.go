package workflows

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"
	"gopkg.in/yaml.v3"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/version"
)

// ResolveInput names the pipeline to run: a pipeline the worker knows, or a
// whole spec, plus parameters.
type ResolveInput struct {
	Pipeline string `json:"pipeline,omitempty"`
	// Spec is YAML text (as a JSON string) or a JSON object of the same shape.
	Spec        json.RawMessage `json:"spec,omitempty"`
	SpecFile    string          `json:"spec_file,omitempty"` // file name for error messages
	Params      map[string]any  `json:"params,omitempty"`
	Parallelism int             `json:"parallelism,omitempty"` // overrides the spec's when > 0
}

// ResolveOutput is the validated plan and how to label the run.
type ResolveOutput struct {
	Plan *dags.Plan `json:"plan"`
	// SearchAttributes says whether the namespace has retrain's search
	// attributes; the workflow only upserts them when it does.
	SearchAttributes bool `json:"search_attributes"`
	// RunSearchAttributes says whether it also has RetrainSchedule and
	// RetrainLogicalDate (false in histories recorded before they existed).
	RunSearchAttributes bool `json:"run_search_attributes,omitempty"`
	// ReportURL is where the run's HTML report is served, with {run} in
	// place of the run id; empty when this worker knows no report server.
	// It comes from the worker's config through here, so it is recorded in
	// history with the plan and replays the same.
	ReportURL string `json:"report_url,omitempty"`
}

// ResolveFailure rides as details on an InvalidPipeline error, so that a
// run whose spec did not validate is still named and labelled by its
// pipeline.
type ResolveFailure struct {
	// Pipeline is the requested pipeline's name, or the inline spec's
	// `name` when it has one; empty when neither says.
	Pipeline         string `json:"pipeline,omitempty"`
	SearchAttributes bool   `json:"search_attributes"`
}

// Resolver turns a ResolveInput into a Plan. It runs as a local activity at
// the start of every run, so its result is recorded in history and replay
// never reads the pipeline files again.
type Resolver struct {
	Library             *dags.Library
	Registry            *dags.Registry
	SearchAttributes    bool
	RunSearchAttributes bool   // see ResolveOutput.RunSearchAttributes
	ReportURL           string // see ResolveOutput.ReportURL
	// AllowInlineSpecs accepts a ResolveInput.Spec; without it a run may
	// only name a pipeline from Library, so that whoever may start a
	// workflow cannot make the worker run arbitrary nodes. It is read only
	// here, in the recorded resolve step, so runs resolved before it
	// existed replay the same.
	AllowInlineSpecs bool
	// Worker is this worker's identity, which refusals name: another
	// worker of the queue may have taken the same run differently.
	Worker string
	// Disagreement, when set, says which other workers of the queue
	// differ from this one in a policy field (PolicyInlineSpecs,
	// PolicyPipelines), as a clause for a refusal's message; "" when none
	// is known to.
	Disagreement func(field string) string
}

// Policy fields a resolve refusal may depend on (the worker package's
// names for them).
const (
	PolicyInlineSpecs = "allow_inline_specs"
	PolicyPipelines   = "pipelines"
)

// InlineSpecsRefused is in the message of a run whose inline spec a
// worker refused: its start, unless other workers of the queue accept
// inline specs, when the message starts by naming the worker that refused.
const InlineSpecsRefused = "this worker does not accept inline specs"

// Resolve loads, validates and compiles the pipeline. A spec or params
// that do not validate fail with errtype.InvalidPipeline, never retried, with a
// ResolveFailure as details.
func (r *Resolver) Resolve(ctx context.Context, in ResolveInput) (ResolveOutput, error) {
	file, data, err := r.source(in)
	if err != nil {
		return ResolveOutput{}, r.invalid(in, data, err)
	}
	spec, err := dags.Parse(file, data)
	if err != nil {
		return ResolveOutput{}, r.invalid(in, data, err)
	}
	plan, err := dags.Compile(spec, r.Registry, in.Params)
	if err != nil {
		return ResolveOutput{}, r.invalid(in, data, err)
	}
	if in.Parallelism > 0 {
		plan.Parallelism = in.Parallelism
	}
	sum := sha256.Sum256(data)
	plan.SpecDigest = "sha256:" + hex.EncodeToString(sum[:])
	plan.Retrain = version.Version
	return ResolveOutput{Plan: plan, SearchAttributes: r.SearchAttributes, RunSearchAttributes: r.RunSearchAttributes, ReportURL: r.ReportURL}, nil
}

// invalid builds the InvalidPipeline error of a spec that did not resolve.
func (r *Resolver) invalid(in ResolveInput, data []byte, err error) error {
	name := in.Pipeline
	if name == "" && len(in.Spec) > 0 {
		name = specName(data)
	}
	return temporal.NewNonRetryableApplicationError(err.Error(), errtype.InvalidPipeline, nil,
		ResolveFailure{Pipeline: name, SearchAttributes: r.SearchAttributes})
}

// specName reads only the `name` of a spec, leniently: a spec that fails
// validation for any other reason still says which pipeline it meant to be.
func specName(data []byte) string {
	var head struct {
		Name string `yaml:"name"`
	}
	if yaml.Unmarshal(data, &head) != nil {
		return ""
	}
	return head.Name
}

func (r *Resolver) source(in ResolveInput) (file string, data []byte, err error) {
	switch {
	case len(in.Spec) > 0 && in.Pipeline != "":
		return "", nil, errors.New(`give either "pipeline" or "spec", not both`)
	case len(in.Spec) > 0 && !r.AllowInlineSpecs:
		_, data, _ := inlineSpec(in) // for the run's name only
		if clause := r.disagreement(PolicyInlineSpecs); clause != "" {
			return "", data, fmt.Errorf("worker %s refused the inline spec: %s: %s; workers on one queue must share one policy: "+
				`start every worker of the queue with --allow-inline-specs (env RETRAIN_ALLOW_INLINE_SPECS=true) or none, or start the run with {"pipeline": "NAME"}`,
				r.Worker, InlineSpecsRefused, clause)
		}
		return "", data, fmt.Errorf("%s: it runs only the pipelines in its pipeline folder; "+
			`start the run with {"pipeline": "NAME"}, or start the worker with --allow-inline-specs (env RETRAIN_ALLOW_INLINE_SPECS=true) to accept them`,
			InlineSpecsRefused)
	case len(in.Spec) > 0:
		return inlineSpec(in)
	case in.Pipeline != "":
		if r.Library == nil {
			return "", nil, r.pipelinesDiffer(fmt.Errorf("pipeline %q: this worker has no pipeline folder", in.Pipeline))
		}
		file, data, err := r.Library.Find(in.Pipeline)
		if err != nil {
			err = r.pipelinesDiffer(err)
		}
		return file, data, err
	default:
		return "", nil, errors.New(`input names no pipeline: give {"pipeline": "NAME"} or {"spec": ...}`)
	}
}

// disagreement is r.Disagreement's clause for field, "" without one.
func (r *Resolver) disagreement(field string) string {
	if r.Disagreement == nil {
		return ""
	}
	return r.Disagreement(field)
}

// pipelinesDiffer adds to a pipeline lookup's error the worker that
// failed it when other workers of the queue know other pipelines.
func (r *Resolver) pipelinesDiffer(err error) error {
	clause := r.disagreement(PolicyPipelines)
	if clause == "" {
		return err
	}
	return fmt.Errorf("worker %s: %w; %s: workers on one queue must share one pipelines folder", r.Worker, err, clause)
}

// inlineSpec returns a run's own spec and the file name its messages use.
func inlineSpec(in ResolveInput) (file string, data []byte, err error) {
	file = in.SpecFile
	if file == "" {
		file = "spec"
	}
	var text string
	if json.Unmarshal(in.Spec, &text) == nil {
		return file, []byte(text), nil // YAML text
	}
	return file, in.Spec, nil // a JSON object is YAML too
}
