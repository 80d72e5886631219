package dags

import "time"

// A Plan is a validated pipeline with its parameters bound: everything the
// Pipeline workflow needs to run it and nothing it would have to look up.
// It is JSON so it can be recorded in workflow history; a later edit of the
// YAML file or of a node type never changes a run that already resolved it.
type Plan struct {
	Pipeline     string         `json:"pipeline"`
	Source       string         `json:"source,omitempty"` // file the spec came from, for messages
	Parallelism  int            `json:"parallelism"`      // max nodes running at once; >= 1
	Params       map[string]any `json:"params"`           // every declared param, defaults applied, typed
	ParamsDigest string         `json:"params_digest"`    // first 16 hex digits of the sha256 of the JSON of Params
	Nodes        []PlanNode     `json:"nodes"`            // topological order (stable: file order among ready nodes)
	OnFailure    []PlanNode     `json:"on_failure,omitempty"`
	// WaitFor are the conditions the run waits for before any node
	// starts (waitfor.go); none in plans recorded before they existed.
	WaitFor []Wait `json:"wait_for,omitempty"`
	// SpecDigest identifies the spec the plan was compiled from: "sha256:"
	// and the hex SHA-256 of its text as the worker read it; Retrain is
	// the release of the worker that compiled it. The resolver sets both;
	// plans recorded before they were kept have neither.
	SpecDigest string `json:"spec_digest,omitempty"`
	Retrain    string `json:"retrain,omitempty"`
}

// PlanNode is one node of a Plan with every default resolved.
type PlanNode struct {
	ID        string         `json:"id"`
	Type      string         `json:"type"`
	Kind      Kind           `json:"kind"`   // how the interpreter runs it
	Target    string         `json:"target"` // activity or child-workflow type name
	Needs     []string       `json:"needs,omitempty"`
	When      string         `json:"when,omitempty"`  // expression; empty means always
	With      map[string]any `json:"with,omitempty"`  // may hold ${...} references, resolved at run time
	Queue     string         `json:"queue,omitempty"` // task queue; empty means the worker's default queue
	Retry     RetryPolicy    `json:"retry"`
	Timeout   time.Duration  `json:"timeout"`   // start-to-close of one attempt
	Heartbeat time.Duration  `json:"heartbeat"` // heartbeat timeout; 0 disables
	// Compensates names the node an on_failure node undoes; it runs only if
	// that node completed. Empty for ordinary nodes.
	Compensates string `json:"compensates,omitempty"`
	// Fields are the declared types of the node type's `with` fields, for
	// ConvertWith at run time. A plan recorded before they were added has
	// none, and its run converts nothing, as it did then.
	Fields map[string]FieldType `json:"fields,omitempty"`
	// Outputs are the output keys the spec declared for the node, with
	// their types (see Node.Outputs): the run fails the node when one is
	// missing or of another type. Empty for most nodes, and in plans
	// recorded before declarations existed, whose runs check nothing.
	Outputs map[string]ParamType `json:"outputs,omitempty"`
	// Foreach fans the node out over a list (foreach.go); nil when the
	// node runs once, as in every plan recorded before foreach existed.
	Foreach *PlanForeach `json:"foreach,omitempty"`
	// Hosts says how the node spreads over hosts (NodeType.Hosts); nil
	// for types that do not, and in plans recorded before it existed.
	Hosts *Hosts `json:"hosts,omitempty"`
	// CancelOnClose is the node type's (NodeType.CancelOnClose); false in
	// plans recorded before it existed, whose children were terminated
	// with their run.
	CancelOnClose bool `json:"cancel_on_close,omitempty"`
	// Cache says the node's result may be served from, and is stored in,
	// the node cache (cache.go); nil when it is not, as in every plan
	// recorded before caching existed.
	Cache *PlanCache `json:"cache,omitempty"`
	// Provenance is the node type's (NodeType.Provenance); false in plans
	// recorded before it existed, whose nodes were sent none.
	Provenance bool `json:"provenance,omitempty"`
	// WaitFor are the conditions the node waits for once its needs
	// succeeded (waitfor.go); none in plans recorded before they existed.
	WaitFor []Wait `json:"wait_for,omitempty"`
	// PinsSnapshot says the node type reads a lake table given by its
	// `table` field at the snapshot its `snapshot_id` field names (the
	// current one when unset): a run whose wait_for saw that table ready
	// sets snapshot_id to the snapshot it saw (workflows/wait.go).
	PinsSnapshot bool `json:"pins_snapshot,omitempty"`
}

// RetryPolicy is a concrete retry policy (all fields set) as run.
type RetryPolicy struct {
	MaxAttempts     int           `json:"max_attempts"` // 1 means no retry
	InitialInterval time.Duration `json:"initial_interval"`
	Backoff         float64       `json:"backoff"`
	MaxInterval     time.Duration `json:"max_interval"`
	NonRetryable    []string      `json:"non_retryable,omitempty"` // error types never retried
}

// Kind says how a node type runs.
type Kind string

const (
	// KindActivity runs the node as one activity (with retries).
	KindActivity Kind = "activity"
	// KindWorkflow runs the node as a child workflow, for node types that fan
	// out work of their own (for example one activity per bucket).
	KindWorkflow Kind = "workflow"
)
