package dags

import (
	"slices"
	"time"
)

// Pos is a position in a spec file. Line and Col are 1-based; zero means
// unknown (for example a field that is absent).
type Pos struct {
	Line, Col int
}

// Spec is a parsed pipeline file. It keeps the positions of what it holds so
// that Validate can point at the offending line; Compile turns it into a
// Plan. Optional settings are pointers (nil: not set) because "not set" and
// "set to the zero value" merge differently over defaults.
type Spec struct {
	File        string // the file name given to Parse, used in messages
	Name        string
	Description string
	Params      []*Param // in file order
	Defaults    Defaults
	Parallelism int // max nodes running at once; 0 means DefaultParallelism
	Nodes       []*Node
	OnFailure   []*Node // compensation nodes; Compensates is set on each
	// Schedules start runs of this pipeline on a cadence (schedule.go).
	Schedules []*Schedule
	// WaitFor are the readiness conditions the run waits for before any
	// node starts (waitfor.go).
	WaitFor []*Wait

	Pos          Pos // the top-level mapping
	ParamsPos    Pos // the params key; zero if absent
	SchedulesPos Pos // the schedules key; zero if absent
}

// Param is a declared pipeline parameter.
type Param struct {
	Name        string
	Type        ParamType // ParamString when not set
	Default     any       // of Type (or nil); meaningful when HasDefault
	HasDefault  bool      // a default was given, or required: false made it null
	Required    bool      // no default was given (or required: true)
	Description string
	Pos         Pos
}

// ParamType is the declared type of a parameter.
type ParamType string

const (
	ParamString ParamType = "string"
	ParamInt    ParamType = "int"
	ParamNumber ParamType = "number"
	ParamBool   ParamType = "bool"
	ParamList   ParamType = "list"
	ParamMap    ParamType = "map"
	// ParamDuration is a duration written as PromQL and ParseDuration
	// both read it ("5m", "1h30m", "2d"): nothing else, so it may go into
	// a query (a check's PromQL) as a value, never as text.
	ParamDuration ParamType = "duration"
	// ParamAny is for declared outputs only (a param cannot be of any
	// type): the output must be present, whatever its value.
	ParamAny ParamType = "any"
)

var paramTypes = []string{"string", "int", "number", "bool", "list", "map", "duration"}

// outputTypes are the types a node's declared outputs may have.
var outputTypes = append(slices.Clone(paramTypes[:6]), string(ParamAny))

// Defaults are the settings nodes inherit when they do not set their own.
type Defaults struct {
	Retry     RetrySpec
	Timeout   *time.Duration
	Heartbeat *time.Duration
	Queue     *string
	// Cache turns caching on for every node whose type may be cached
	// (NodeType.Cacheable); a node's own cache: wins.
	Cache *CacheSpec
	Pos   Pos
}

// RetrySpec is a retry block as written: any subset of a RetryPolicy.
// It is merged field by field over the policy it refines.
type RetrySpec struct {
	MaxAttempts     *int
	InitialInterval *time.Duration
	Backoff         *float64
	MaxInterval     *time.Duration
	NonRetryable    []string // nil: not set; empty: explicitly none
	Pos             Pos      // the retry key; zero if absent
}

// IsZero reports whether the block sets nothing.
func (r RetrySpec) IsZero() bool {
	return r.MaxAttempts == nil && r.InitialInterval == nil && r.Backoff == nil &&
		r.MaxInterval == nil && r.NonRetryable == nil
}

// over returns base with the fields r sets replaced.
func (r RetrySpec) over(base RetryPolicy) RetryPolicy {
	if r.MaxAttempts != nil {
		base.MaxAttempts = *r.MaxAttempts
	}
	if r.InitialInterval != nil {
		base.InitialInterval = *r.InitialInterval
	}
	if r.Backoff != nil {
		base.Backoff = *r.Backoff
	}
	if r.MaxInterval != nil {
		base.MaxInterval = *r.MaxInterval
	}
	if r.NonRetryable != nil {
		base.NonRetryable = r.NonRetryable
	}
	// Never share the slice with the spec: plans outlive it.
	if base.NonRetryable != nil {
		base.NonRetryable = append([]string{}, base.NonRetryable...)
	}
	return base
}

// Built-in defaults, used where neither a node nor the spec's defaults
// block says otherwise.
const (
	DefaultParallelism = 16
	DefaultTimeout     = time.Hour
	DefaultHeartbeat   = 30 * time.Second
)

// DefaultRetry is the built-in retry policy.
func DefaultRetry() RetryPolicy {
	return RetryPolicy{MaxAttempts: 3, InitialInterval: time.Second, Backoff: 2.0, MaxInterval: time.Minute}
}

// Node is one step of a spec: an entry of nodes or of on_failure.
type Node struct {
	ID          string
	Type        string
	Description string
	Needs       []string
	When        string // expression; empty means always
	With        map[string]any
	Retry       RetrySpec
	Timeout     *time.Duration
	Heartbeat   *time.Duration
	Queue       *string
	Cache       *CacheSpec // nil: the defaults'
	Compensates string     // on_failure nodes only: the node they undo
	// Outputs declares output keys of a node whose type has open outputs
	// (a command writing $RETRAIN_OUTPUTS), with their types: references
	// to other keys are errors, the types feed the check of references
	// into typed fields, and the run fails the node if one is missing or
	// of another type. Nil: none declared; keys are not checked.
	Outputs map[string]ParamType
	// Foreach fans the node out over a list (foreach.go); nil when the
	// node runs once.
	Foreach *Foreach
	// WaitFor are readiness conditions this node waits for once its
	// needs have succeeded (waitfor.go).
	WaitFor []*Wait

	Pos        Pos // the node's mapping
	TypePos    Pos
	NeedsPos   []Pos // one per Needs entry
	WhenPos    Pos
	WithPos    Pos            // the with key
	WithKeyPos map[string]Pos // line of each with key
	// WithPaths are the positions of values nested in with, by their
	// path as messages write it ("checks[0]", "steps[2].percent",
	// "metrics.auc"); top-level keys are in WithKeyPos.
	WithPaths      map[string]Pos
	CompensatesPos Pos
	OutputsPos     Pos            // the outputs key
	OutputKeyPos   map[string]Pos // position of each declared output
}

// Param returns the declared param with the given name, or nil.
func (s *Spec) Param(name string) *Param {
	for _, p := range s.Params {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Node returns the node (from nodes or on_failure) with the given id, or nil.
func (s *Spec) Node(id string) *Node {
	for _, list := range [][]*Node{s.Nodes, s.OnFailure} {
		for _, n := range list {
			if n.ID == id {
				return n
			}
		}
	}
	return nil
}
