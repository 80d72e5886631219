// Package nodetype is the core every node type is written against, the
// built-in ones and a team's own: a dags.NodeType (what a spec's `with`
// block takes and what the node outputs) bundled with the function that
// runs it, the activity wrapper every node runs in (keep-alive heartbeats,
// progress, attempt numbers, error types), and the wire types the pipeline
// workflow sends and gets back.
//
// A node type declares its inputs once, as a Go struct: New derives the
// validator's field list (names, types, required fields, defaults, docs)
// from its tags, and its outputs from the struct its function returns.
// A team registers its own types in its own worker binary with
// worker.WithNodeTypes, next to the built-in ones:
//
//	w, err := worker.New(ctx, c, namespace, cfg, logger, worker.WithNodeTypes(mytype.Type()))
//
// and validates specs that use them offline with worker.Registry:
//
//	reg, err := worker.Registry(mytype.Type())
//	spec, err := dags.Load(file, data, reg)
//
// The package sits low in the import graph (it needs only dags and the
// Temporal SDK) so that the built-in node types (package nodes/...) and a
// team's are written the same way; see examples/customnode for a whole
// binary.
package nodetype

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/dags"
)

// Input is what the pipeline workflow sends to a node's activity (and to a
// node type's child workflow): where the node runs, and its `with` block
// with every ${...} reference resolved and converted to its field's type.
// Its JSON form is recorded in every run's history; the field names are a
// wire format and do not change.
type Input struct {
	Pipeline string         `json:"pipeline"` // the spec's name
	RunID    string         `json:"run_id"`   // the run's id (its workflow id)
	Node     string         `json:"node"`     // the node's id in the spec
	Type     string         `json:"type"`     // the node's type name
	With     map[string]any `json:"with,omitempty"`
	// Options are the node's timeout, heartbeat and retry policy from the
	// plan, sent to node types that run as child workflows and schedule
	// activities of their own (promote_features). Nil for activity nodes,
	// and in runs recorded before it was sent.
	Options *Options `json:"options,omitempty"`
	// Secrets says where With holds ${secret.NAME} references that the
	// pipeline's author wrote in the spec: the only ones a step resolves
	// (progenv). A "${secret." anywhere else in With arrived in a value
	// (a param, an output) and is text. Always sent, as [] when there is
	// none: its absence marks an input scheduled by a worker from before
	// it existed (LegacySecrets).
	Secrets []dags.SecretRef `json:"secrets"`
	// LogicalTime is the time the run is for, RFC 3339, as
	// ${run.logical_time}: what a deploy records as the data a version was
	// trained for. Empty in runs recorded before it was sent.
	LogicalTime string `json:"logical_time,omitempty"`
	// Timezone is the IANA zone of the schedule that started the run
	// (runs.PipelineInput.Timezone), in which the run's days are: the
	// default of a split's timezone. Empty: none (UTC), and in runs
	// recorded before it was sent.
	Timezone string `json:"timezone,omitempty"`
	// Provenance is where the node's inputs came from, sent to node types
	// that record it with what they register (dags.NodeType.Provenance:
	// deploy, canary); nil for the others and in runs recorded before it
	// was sent.
	Provenance *Provenance `json:"provenance,omitempty"`
}

// Provenance is what a run knows of how a node's inputs were made: the
// spec and params it resolved, the retrain release that resolved them,
// and each node upstream of the node.
type Provenance struct {
	SpecDigest   string         `json:"spec_digest,omitempty"` // "sha256:<hex>" of the spec's text
	Retrain      string         `json:"retrain,omitempty"`     // the release that resolved the plan
	Params       map[string]any `json:"params,omitempty"`      // every param, bound
	ParamsDigest string         `json:"params_digest,omitempty"`
	// Trainer is the upstream node the node's `dir` refers to (the
	// train node whose files it registers); empty when none does.
	Trainer  string   `json:"trainer,omitempty"`
	Upstream []Origin `json:"upstream,omitempty"` // in plan order
}

// Origin is one upstream node of a Provenance.
type Origin struct {
	Node string `json:"node"`
	Type string `json:"type"`
	// Run is the run that computed the node's result: this run, or the
	// earlier one a rerun took it over from.
	Run string `json:"run"`
	// Key is the content key of the node's execution, when the run knows
	// one; empty otherwise (never made up).
	Key string `json:"key,omitempty"`
}

// Options are how a node's activities run, as its plan node says.
type Options struct {
	Timeout   time.Duration    `json:"timeout"`   // start-to-close of one attempt
	Heartbeat time.Duration    `json:"heartbeat"` // 0 disables
	Retry     dags.RetryPolicy `json:"retry"`
	// Queue is the node's task queue, where a child workflow sends the
	// node's own work (a train gang's hosts); empty: the child's queue.
	Queue string `json:"queue,omitempty"`
}

// Result is what every node returns to the pipeline workflow.
type Result struct {
	Outputs   map[string]any `json:"outputs,omitempty"`
	Attempt   int32          `json:"attempt"`    // the attempt that produced this result (1-based)
	StartedAt time.Time      `json:"started_at"` // worker clock, start of that attempt
	EndedAt   time.Time      `json:"ended_at"`   // worker clock, end of that attempt
}

// FailureDetails ride on a failed node's error so the workflow can report
// how many attempts were made; Temporal's ActivityError does not carry it.
type FailureDetails struct {
	Attempt int32 `json:"attempt"`
}

// Func runs one attempt of a node. Its outputs must be small JSON values
// (ids, URIs, numbers): they are recorded in the run's history, which caps
// a payload at 2 MB. An error fails the attempt and is retried under the
// node's retry policy unless it is Permanent. The worker heartbeats for the
// function while it runs, and ctx is cancelled when the node is cancelled
// or times out: a long-running Func must return when ctx is done.
type Func func(ctx context.Context, in Input) (map[string]any, error)

// Type is a node type and its implementation: Run for a type that runs as
// an activity, Workflow for one that runs as a child workflow.
type Type struct {
	NodeType dags.NodeType
	Run      Func
	// Workflow is the child workflow of a type whose Kind is
	// dags.KindWorkflow, a func(workflow.Context, Input) (Result, error)
	// registered under NodeType.Target.
	Workflow any
	// Activities are the activities Workflow schedules, by name; the
	// worker registers them next to the node types'.
	Activities map[string]any
	// Bounded names those of Activities that Workflow schedules on a task
	// queue of their own, BoundedQueue(its queue, name): the fan-out
	// groups of a node (promote_features' bucket groups, split's). Every
	// worker polls that queue with its own slots, as many as its
	// --activity-concurrency for the name says (default GOMAXPROCS), so a
	// worker takes no more groups than it can run, and a group waiting
	// for a slot waits on the server, where another worker's free slot
	// picks it up, not inside an activity slot of this one.
	Bounded []string
	// Workflows are child workflows, by name, that a node of an activity
	// type runs as in some cases (NodeType.Hosts: a train node on several
	// hosts); the worker registers them, and the guard accepts their
	// activities, as it does a workflow type's.
	Workflows map[string]any
	// Hosted names those of Activities that must run on one chosen host:
	// a worker polls them from HostQueue(queue, its host id) for each
	// queue it polls, so a workflow that picked the host sends them there
	// (a gang's GPU leases and ranks).
	Hosted []string
	// Cache, when set, lets a spec serve the type's nodes from the node
	// cache (cache.go); set it with WithCache.
	Cache *Cache
	// Verify, when set, says whether what a succeeded node's outputs
	// point to still exists, so that a later run may take them over (a
	// rerun's reused nodes): nil when they do, an error saying what is
	// gone otherwise. with is the node's resolved `with`. Without it the
	// worker checks the outputs generically (objects they name in the
	// object store, Iceberg snapshots, model versions).
	Verify func(ctx context.Context, with, outputs map[string]any) error
	// OutputTypes are the types of the outputs New derived from its
	// outputs struct (nil for a map): what `retrain test` checks a
	// node's stubbed outputs against.
	OutputTypes map[string]OutputType

	err error // a schema New could not derive, reported by Validate
}

// New returns the Type of a node whose inputs are a W and whose outputs are
// an O. The spec's `with` block is decoded into a W, defaults first (see
// Schema for the tags), so run reads typed fields; a block that does not
// decode fails the node without retry, as BadInput. t's Fields are derived
// from W (see Schema) and its Outputs from O's JSON names. When W or O is a
// map, which cannot declare its keys, t's own Fields or Outputs stand (none
// means any output key is accepted).
func New[W, O any](t dags.NodeType, run func(ctx context.Context, in Input, with W) (O, error)) Type {
	fields, err := Schema[W]()
	if err != nil {
		return Type{NodeType: t, err: fmt.Errorf("node type %q: inputs: %w", t.Name, err)}
	}
	outputs, err := OutputNames[O]()
	if err != nil {
		return Type{NodeType: t, err: fmt.Errorf("node type %q: outputs: %w", t.Name, err)}
	}
	// A map cannot declare its keys: then what t lists stands.
	if fields != nil {
		t.Fields = fields
	}
	if outputs != nil {
		t.Outputs = outputs
	}
	return Type{
		NodeType:    t,
		OutputTypes: OutputTypes[O](),
		Run: func(ctx context.Context, in Input) (map[string]any, error) {
			with, err := DecodeWith[W](in.With)
			if err != nil {
				return nil, Permanent(BadInput, "node %s (type %s): %v", in.Node, in.Type, err)
			}
			ctx, secrets := withSecretRegistry(ctx) // Activity's, when run there
			out, err := run(withSecretRefs(ctx, in.Secrets), in, with)
			mask := secrets.get()
			if err != nil {
				return nil, mask.Error(err)
			}
			outputs, err := Outputs(out)
			if err != nil {
				return nil, mask.Error(err)
			}
			return mask.Outputs(outputs), nil
		},
	}
}

// NewWorkflow returns the Type of a node that runs as the child workflow
// wf, registered as workflowName, with inputs W and outputs O declared as
// New does (wf decodes its Input's With with DecodeWith[W] and returns an
// O's Outputs). activities are the activities wf schedules, by name.
func NewWorkflow[W, O any](t dags.NodeType, workflowName string, wf any, activities map[string]any) Type {
	typ := New(t, func(context.Context, Input, W) (O, error) { var o O; return o, nil })
	typ.NodeType.Kind = dags.KindWorkflow
	typ.NodeType.Target = workflowName
	typ.Run = nil
	typ.Workflow = wf
	typ.Activities = activities
	return typ
}

// BoundedQueue is the task queue on which a workflow running on queue
// schedules its bounded activity (see Type.Bounded). It is derived from
// the workflow's own queue, so workers of a node's queue serve it.
func BoundedQueue(queue, activity string) string { return queue + "/" + activity }

// HostQueue is the task queue of queue's work that must run on the worker
// whose host id is host (Type.Hosted).
func HostQueue(queue, host string) string { return queue + "/host/" + host }

// RetryPolicy is a node's retry policy as Temporal's.
func RetryPolicy(p dags.RetryPolicy) *temporal.RetryPolicy {
	return &temporal.RetryPolicy{
		MaximumAttempts:        int32(p.MaxAttempts),
		InitialInterval:        p.InitialInterval,
		BackoffCoefficient:     p.Backoff,
		MaximumInterval:        p.MaxInterval,
		NonRetryableErrorTypes: p.NonRetryable,
	}
}

// BadInput is the error type of a node whose input can never work
// (errtype.BadInput, repeated here so this package stays a leaf).
const BadInput = "BadInput"

// Permanent returns an error that fails a node without retrying it: bad
// input, or a check that failed on data that will not change. errType is
// what a spec's retry.non_retryable and the run's result name it by.
func Permanent(errType, format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), errType, nil)
}

// Decode converts a `with` map into a typed value by way of JSON, the form
// it travelled through the run's history in. It applies no defaults; see
// DecodeWith.
func Decode(with map[string]any, into any) error {
	b, err := json.Marshal(with)
	if err != nil {
		return fmt.Errorf("encode with: %w", err)
	}
	if err := json.Unmarshal(b, into); err != nil {
		return fmt.Errorf("decode with: %w", err)
	}
	return nil
}

// nameRe is the shape of a type name: what spec authors type after `type:`.
var nameRe = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// targetRe is the shape of an activity type name; it is what the Web UI's
// timeline shows, so it stays printable.
var targetRe = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]*$`)

// fieldTypes are the dags.FieldType values the validator knows; an unknown
// one would let any value through, so it is refused here.
var fieldTypes = map[dags.FieldType]bool{
	dags.FieldString: true, dags.FieldInt: true, dags.FieldNumber: true, dags.FieldBool: true,
	dags.FieldDuration: true, dags.FieldStringList: true, dags.FieldIntList: true,
	dags.FieldStringMap: true, dags.FieldAny: true,
}

// Validate reports what would make t unusable: a name a spec cannot use,
// no function, a malformed field list or one New could not derive. It says
// nothing about collisions with other types; the worker checks those.
func (t Type) Validate() error {
	nt := t.NodeType
	if !nameRe.MatchString(nt.Name) {
		return fmt.Errorf("node type name %q: want lower-case letters, digits and _, starting with a letter", nt.Name)
	}
	if t.err != nil {
		return t.err
	}
	switch nt.Kind {
	case "", dags.KindActivity:
		if t.Run == nil {
			return fmt.Errorf("node type %q has no Run function", nt.Name)
		}
	case dags.KindWorkflow:
		if nt.Target == "" || t.Workflow == nil {
			return fmt.Errorf("node type %q runs as a child workflow but has none (Target, Workflow)", nt.Name)
		}
		for _, b := range t.Bounded {
			if _, ok := t.Activities[b]; !ok {
				return fmt.Errorf("node type %q: bounded activity %q is not one of its activities", nt.Name, b)
			}
		}
	default:
		return fmt.Errorf("node type %q: kind %q is not supported", nt.Name, nt.Kind)
	}
	if nt.Target != "" && !targetRe.MatchString(nt.Target) {
		return fmt.Errorf("node type %q: activity type name %q: want letters, digits, _, . and -, starting with a letter", nt.Name, nt.Target)
	}
	for _, h := range t.Hosted {
		if _, ok := t.Activities[h]; !ok {
			return fmt.Errorf("node type %q: hosted activity %q is not one of its activities", nt.Name, h)
		}
	}
	if hs := nt.Hosts; hs != nil {
		if _, ok := t.Workflows[hs.Workflow]; !ok {
			return fmt.Errorf("node type %q: spreads over hosts as workflow %q, which is not one of its Workflows", nt.Name, hs.Workflow)
		}
		if !slices.ContainsFunc(nt.Fields, func(f dags.Field) bool { return f.Name == hs.Field && f.Type == dags.FieldInt }) {
			return fmt.Errorf("node type %q: spreads over hosts by field %q, which is not an int field of its `with`", nt.Name, hs.Field)
		}
	}
	seen := map[string]bool{}
	var errs []error
	for i, f := range nt.Fields {
		switch {
		case f.Name == "":
			errs = append(errs, fmt.Errorf("field %d has no name", i+1))
		case seen[f.Name]:
			errs = append(errs, fmt.Errorf("field %q listed twice", f.Name))
		case !fieldTypes[f.Type]:
			errs = append(errs, fmt.Errorf("field %q: unknown type %q", f.Name, f.Type))
		}
		seen[f.Name] = true
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("node type %q: %w", nt.Name, err)
	}
	return nil
}

// TargetName is the activity (or workflow) type t registers as:
// NodeType.Target, or the type's name when that is empty.
func (t Type) TargetName() string {
	if t.NodeType.Target != "" {
		return t.NodeType.Target
	}
	return t.NodeType.Name
}
