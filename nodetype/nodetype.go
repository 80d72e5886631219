// Package nodetype is the public API for writing a node type in Go: a
// dags.NodeType (what a spec's `with` block takes and what the node outputs)
// bundled with the function that runs it. A team registers its own types in
// its own worker binary with worker.WithNodeTypes, next to the built-in ones:
//
//	w, err := worker.New(ctx, c, namespace, cfg, logger, worker.WithNodeTypes(mytype.Type()))
//
// and validates specs that use them offline with worker.Registry:
//
//	reg, err := worker.Registry(mytype.Type())
//	spec, err := dags.Load(file, data, reg)
//
// The package sits low in the import graph (it needs only dags and the
// Temporal SDK's error type) so that built-in node types can be written
// against it too; see examples/customnode for a whole binary.
package nodetype

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"

	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/dags"
)

// Input is what a node's function gets: where the node runs, and its
// `with` block with every ${...} reference already resolved.
type Input struct {
	Pipeline string         // the spec's name
	RunID    string         // the run's id (its workflow id)
	Node     string         // the node's id in the spec
	Type     string         // the node's type name
	With     map[string]any // decoded from JSON: numbers are float64
}

// Func runs one attempt of a node. Its outputs must be small JSON values
// (ids, URIs, numbers): they are recorded in the run's history, which caps
// a payload at 2 MB. An error fails the attempt and is retried under the
// node's retry policy unless it is Permanent. The worker heartbeats for the
// function while it runs, and ctx is cancelled when the node is cancelled
// or times out: a long-running Func must return when ctx is done.
type Func func(ctx context.Context, in Input) (map[string]any, error)

// Type is a node type and its implementation.
type Type struct {
	NodeType dags.NodeType
	Run      Func
}

// New returns a Type whose function gets the node's `with` block decoded
// into a W (by way of JSON, with encoding/json's tags), so it reads typed
// fields rather than a map. A `with` block that does not decode fails the
// node without retry, as BadInput.
func New[W any](t dags.NodeType, run func(ctx context.Context, in Input, with W) (map[string]any, error)) Type {
	return Type{
		NodeType: t,
		Run: func(ctx context.Context, in Input) (map[string]any, error) {
			var with W
			if err := Decode(in.With, &with); err != nil {
				return nil, Permanent(ErrBadInput, "node %s (type %s): %v", in.Node, in.Type, err)
			}
			return run(ctx, in, with)
		},
	}
}

// ErrBadInput is the error type of a node whose input can never work.
const ErrBadInput = "BadInput"

// Permanent returns an error that fails a node without retrying it: bad
// input, or a check that failed on data that will not change. errType is
// what a spec's retry.non_retryable and the run's result name it by.
func Permanent(errType, format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), errType, nil)
}

// Decode converts a `with` map into a typed value by way of JSON, the form
// it travelled through the run's history in.
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
// no function, a child-workflow kind, a malformed field list. It says
// nothing about collisions with other types; the worker checks those.
func (t Type) Validate() error {
	nt := t.NodeType
	if !nameRe.MatchString(nt.Name) {
		return fmt.Errorf("node type name %q: want lower-case letters, digits and _, starting with a letter", nt.Name)
	}
	if t.Run == nil {
		return fmt.Errorf("node type %q has no Run function", nt.Name)
	}
	if nt.Kind != "" && nt.Kind != dags.KindActivity {
		return fmt.Errorf("node type %q: kind %q is not supported; a Go node type runs as an activity", nt.Name, nt.Kind)
	}
	if nt.Target != "" && !targetRe.MatchString(nt.Target) {
		return fmt.Errorf("node type %q: activity type name %q: want letters, digits, _, . and -, starting with a letter", nt.Name, nt.Target)
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

// TargetName is the activity type t registers as: NodeType.Target, or the
// type's name when that is empty.
func (t Type) TargetName() string {
	if t.NodeType.Target != "" {
		return t.NodeType.Target
	}
	return t.NodeType.Name
}
