package dags

import (
	"fmt"
	"sort"
)

// NodeType describes a kind of node a spec may use: what its `with` block
// takes, what it outputs and how the interpreter runs it. The set of types is
// data handed to the validator and the worker, so a new step type is one new
// NodeType value plus its activity; the interpreter never changes.
type NodeType struct {
	Name   string
	Doc    string
	Kind   Kind   // defaults to KindActivity
	Target string // activity or workflow type name; defaults to Name
	Queue  string // default task queue for nodes of this type ("" = worker default)

	// Fields are the keys `with` accepts. A key not listed is an error,
	// unless OpenWith is set.
	Fields []Field
	// OpenWith accepts any `with` keys (of any type) besides Fields.
	OpenWith bool
	// Outputs lists the output keys a node of this type returns, so that a
	// reference to a misspelt output is caught before the run. Empty means
	// the type's outputs are dynamic and any key is accepted.
	Outputs []string
	// OpenOutputs says a node of this type may output keys besides
	// Outputs, chosen by what it runs (a command's $RETRAIN_OUTPUTS file).
	// A reference to any key of such a node passes validation, unless its
	// spec node declares its outputs (Node.Outputs): then only the keys in
	// Outputs and the declared ones do. Only these types take a
	// declaration.
	OpenOutputs bool
	// Check validates `with` beyond the field list (value ranges, mutually
	// exclusive keys). Values that hold ${...} references are only known at
	// run time; Check should skip those. May be nil.
	Check func(with map[string]any) error
	// Metrics, when set, says which metric names the output named output
	// of a node of this type holds (an evaluation, a map of metric to
	// figure), from the node's `with` with known params resolved; ok is
	// false when only the run knows (what a program of the user's
	// writes), and then nothing is checked against it.
	Metrics func(output string, with map[string]any) (names []string, ok bool)
	// CheckMetrics, when set, checks the metric names a node of this type
	// reads by name (a gate's thresholds) against what it reads them
	// from. source says, for a `with` value such as
	// ${nodes.evaluate.outputs.evaluation}, the metric names it holds and
	// which node gives them; ok false when they cannot be known, and then
	// CheckMetrics should say nothing rather than guess. Errors are
	// reported as Check's are (AtField places them).
	CheckMetrics func(with map[string]any, source func(v any) (names []string, from string, ok bool)) error
	// Hosts, when set, lets a node of this type span several hosts: a node
	// whose resolved `with` field Hosts.Field is above 1 runs as the child
	// workflow Hosts.Workflow (one group of work per host, started and
	// stopped together) instead of as Kind says.
	Hosts *Hosts
	// CancelOnClose: a node of this (workflow) type is cancelled, not
	// terminated, when its run closes while it runs (the run terminated
	// or timed out), so it can undo what it holds: a canary sets traffic
	// back to production.
	CancelOnClose bool
	// Cacheable: a node of this type computes its outputs from its inputs
	// alone and has no effect on the world, so a spec may serve it from
	// the node cache (`cache:`). Types with effects (deploy, canary,
	// rollbacks, table maintenance, webhooks) leave it false, and a
	// `cache:` on them is a validation error.
	Cacheable bool
	// CacheOptIn: only a node's own `cache:` caches a node of this type,
	// never the spec's defaults (a command, which may have effects).
	CacheOptIn bool
	// Provenance: a node of this type registers what a run made (a model
	// version), and the run sends it where that came from
	// (nodetype.Provenance): the spec's digest, the params, the upstream
	// nodes and the run each was computed in.
	Provenance bool
}

// Hosts is how a node type spreads over hosts (NodeType.Hosts).
type Hosts struct {
	Field    string `json:"field"`    // the int `with` field holding the number of hosts
	Workflow string `json:"workflow"` // the child workflow a node on several hosts runs as
}

// FieldType is the JSON shape a `with` field must have.
type FieldType string

const (
	FieldString     FieldType = "string"
	FieldInt        FieldType = "int"
	FieldNumber     FieldType = "number"
	FieldBool       FieldType = "bool"
	FieldDuration   FieldType = "duration" // string parsed by ParseDuration
	FieldStringList FieldType = "[]string"
	FieldIntList    FieldType = "[]int"
	FieldStringMap  FieldType = "map[string]string"
	FieldAny        FieldType = "any"
)

// Field is one key of a node type's `with` block.
type Field struct {
	Name     string
	Type     FieldType
	Required bool
	Doc      string
	// Default is the value the node uses when the key is absent, as it
	// reads in a spec ("" when there is none or it is computed at run
	// time; Doc then says what it is).
	Default string
	// Nested types values inside a FieldAny field (see Nested).
	Nested []Nested
	// Literal fields must be written out in the spec: a ${...} (a param,
	// another node's output) is refused by validation. For switches only
	// the spec's author may turn on, such as deploy's force.
	Literal bool
}

// Registry holds the node types a validator and worker know about.
type Registry struct {
	types map[string]NodeType
}

// NewRegistry returns a registry of the given types, with defaults filled in.
func NewRegistry(types ...NodeType) (*Registry, error) {
	r := &Registry{types: make(map[string]NodeType, len(types))}
	for _, t := range types {
		if t.Name == "" {
			return nil, fmt.Errorf("node type with empty name")
		}
		if _, dup := r.types[t.Name]; dup {
			return nil, fmt.Errorf("node type %q registered twice", t.Name)
		}
		if t.Kind == "" {
			t.Kind = KindActivity
		}
		if t.Target == "" {
			t.Target = t.Name
		}
		r.types[t.Name] = t
	}
	return r, nil
}

// Lookup returns the named type.
func (r *Registry) Lookup(name string) (NodeType, bool) {
	t, ok := r.types[name]
	return t, ok
}

// Names returns the registered type names, sorted.
func (r *Registry) Names() []string {
	names := make([]string, 0, len(r.types))
	for n := range r.types {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
