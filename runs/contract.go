package runs

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/nodecache"
)

// This file is the Pipeline workflow's contract: its name, input, result,
// queries and search attributes. It lives here, not with the workflow, so
// that a client (this package, the report, another service) reads runs
// without linking the interpreter.

// Names other processes use to start and inspect runs.
const (
	PipelineWorkflow = "Pipeline"        // workflow type
	ResolveActivity  = "ResolvePipeline" // local activity that compiles the plan
	StateQuery       = "state"           // query: the Result so far
	PlanQuery        = "plan"            // query: the resolved plan
)

// Search attributes every run carries, so the Temporal UI can filter runs by
// pipeline and by parameters.
var (
	PipelineKey     = temporal.NewSearchAttributeKeyKeyword("RetrainPipeline")
	ParamsDigestKey = temporal.NewSearchAttributeKeyKeyword("RetrainParamsDigest")
	// ScheduleKey is the schedule that started the run (the spec schedule's
	// id, else the Temporal Schedule's); unset for a run started by hand.
	ScheduleKey = temporal.NewSearchAttributeKeyKeyword("RetrainSchedule")
	// LogicalDateKey is ${run.logical_date}, YYYY-MM-DD: filters and sorts
	// runs by the day they are for.
	LogicalDateKey = temporal.NewSearchAttributeKeyKeyword("RetrainLogicalDate")
)

// SearchAttributes returns the custom search attributes a namespace needs.
func SearchAttributes() map[string]enumspb.IndexedValueType {
	return map[string]enumspb.IndexedValueType{
		PipelineKey.GetName():     enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		ParamsDigestKey.GetName(): enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		ScheduleKey.GetName():     enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		LogicalDateKey.GetName():  enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	}
}

// RunSearchAttributes are the attributes of SearchAttributes that retrain
// added later (schedule and logical date): a namespace set up before may
// lack them, and runs then set only the others.
func RunSearchAttributes() []string {
	return []string{ScheduleKey.GetName(), LogicalDateKey.GetName()}
}

// PipelineInput starts a run. It is plain JSON so the Temporal UI's Start
// Workflow form and any SDK can start a pipeline:
//
//	{"pipeline": "hello", "params": {"date": "2026-11-20"}}
type PipelineInput struct {
	// Pipeline names a pipeline from the worker's pipeline folder.
	Pipeline string `json:"pipeline,omitempty"`
	// Spec is a whole spec instead: YAML text as a JSON string, or a JSON
	// object of the same shape.
	Spec        json.RawMessage `json:"spec,omitempty"`
	SpecFile    string          `json:"spec_file,omitempty"`
	Params      map[string]any  `json:"params,omitempty"`
	Parallelism int             `json:"parallelism,omitempty"`
	// LogicalDate is the date (YYYY-MM-DD) or time (RFC 3339) the run is
	// for, as ${run.logical_date} and ${run.logical_time}, when it was not
	// started by a schedule (whose nominal action time wins). Empty: the
	// run's start time.
	LogicalDate string `json:"logical_date,omitempty"`
	// Schedule is the id of the spec schedule that starts the run (set in
	// the schedule's action), and Timezone its time zone, in which the
	// logical date is taken (default UTC).
	Schedule string `json:"schedule,omitempty"`
	Timezone string `json:"timezone,omitempty"`
	// LatestStart is set by a when_ready schedule, which starts its runs
	// early to wait for their data: its cron's time of day (HH:MM, in
	// Timezone). The run is for that time on its logical date (its
	// ${run.logical_time}), and its waits' deadlines count from it when
	// it is later than the wait's start.
	LatestStart string `json:"latest_start,omitempty"`
	// DryRun resolves and validates the pipeline and its params on a
	// worker of the queue, as a run would, and ends the run there without
	// running a node: how `retrain schedule apply` learns whether the
	// queue's workers know a pipeline (such a check's workflow id starts
	// with CheckIDPrefix).
	DryRun bool `json:"dry_run,omitempty"`
	// NoCache recomputes every node marked `cache:` instead of looking
	// its result up; the fresh results still replace the cache's entries.
	// Refresh does so for the nodes it names only.
	NoCache bool     `json:"no_cache,omitempty"`
	Refresh []string `json:"refresh,omitempty"`
	// Reuse makes the run a rerun of an earlier one (Rerun): it takes
	// over the earlier run's results of the nodes it may reuse instead of
	// running them. Nil for an ordinary run.
	Reuse *Reuse `json:"reuse,omitempty"`
}

// CheckIDPrefix starts the workflow id of every dry run `retrain schedule
// apply` makes; `runs list` leaves them out.
const CheckIDPrefix = "retrain-check/"

// Status is the state of a run.
type Status string

const (
	StatusRunning   Status = "running"
	StatusSucceeded Status = "succeeded"
	StatusFailed    Status = "failed"
	StatusCancelled Status = "cancelled"
	// StatusWaiting is a running run waiting for its data (wait_for):
	// the state query and `runs list` say so, with Result.Waiting.
	StatusWaiting Status = "waiting"
	// StatusSkipped is a run that ended without running any node: its
	// data was not ready by a deadline that said on_deadline: skip.
	// Temporal shows it completed.
	StatusSkipped Status = "skipped"
)

// NodeStatus is the state of one node.
type NodeStatus string

const (
	NodePending   NodeStatus = "pending"
	NodeRunning   NodeStatus = "running"
	NodeSucceeded NodeStatus = "succeeded"
	NodeFailed    NodeStatus = "failed"
	NodeSkipped   NodeStatus = "skipped"   // `when` was false, or an upstream node was skipped
	NodeCancelled NodeStatus = "cancelled" // never started (the run failed first) or cancelled while running
	NodeWaiting   NodeStatus = "waiting"   // its needs succeeded; waiting for its data (wait_for)
)

// Waiting is a wait_for condition a run, or one of its nodes, is waiting
// for: what its last check saw and since when.
type Waiting struct {
	Node      string    `json:"node,omitempty"` // empty: the run's own wait_for
	Condition string    `json:"condition"`      // "table features.user_daily"
	Saw       string    `json:"saw"`            // what the last check found
	Since     time.Time `json:"since"`
	Deadline  time.Time `json:"deadline"`
	Checks    int       `json:"checks"`
}

// Text is how the run's state shows the wait at now: "waiting for data:
// features.user_daily has no rows for 2026-11-27 (...) [table
// features.user_daily, 12 checks over 1h2m, deadline in 4h58m]".
func (w Waiting) Text(now time.Time) string {
	who := ""
	if w.Node != "" {
		who = "node " + w.Node + " "
	}
	left := w.Deadline.Sub(now).Round(time.Second)
	checks := fmt.Sprintf("%d checks", w.Checks)
	if w.Checks == 1 {
		checks = "1 check"
	}
	return fmt.Sprintf("%swaiting for data: %s [%s, %s over %s, deadline in %s]", who, w.Saw, w.Condition,
		checks, now.Sub(w.Since).Round(time.Second), max(left, 0))
}

// Ready is a wait_for condition that held, as the run recorded it: a table
// condition's snapshot is the one the run's data was there in.
type Ready struct {
	Node       string    `json:"node,omitempty"`
	Condition  string    `json:"condition"`
	Saw        string    `json:"saw"`
	At         time.Time `json:"at"`
	Table      string    `json:"table,omitempty"`
	SnapshotID string    `json:"snapshot_id,omitempty"` // a string: JSON numbers lose int64 digits
	Rows       int64     `json:"rows,omitempty"`
}

// NodeState is what a run reports about one node.
type NodeState struct {
	ID          string     `json:"id"`
	Type        string     `json:"type"`
	Status      NodeStatus `json:"status"`
	Attempts    int32      `json:"attempts"`
	ScheduledAt *time.Time `json:"scheduled_at,omitempty"` // when the workflow first scheduled it
	// StartedAt and EndedAt bound the attempt that produced the result, on
	// the worker's clock; for a node that failed without reaching a worker
	// they are the workflow's view.
	StartedAt   *time.Time     `json:"started_at,omitempty"`
	EndedAt     *time.Time     `json:"ended_at,omitempty"`
	Outputs     map[string]any `json:"outputs,omitempty"`
	Error       string         `json:"error,omitempty"`
	Reason      string         `json:"reason,omitempty"` // why it was skipped or cancelled
	Compensates string         `json:"compensates,omitempty"`
	// ReusedFrom is the run that computed the result of this node a
	// rerun took over instead of running it (its outputs, attempts and
	// times are that run's): the earlier run, or the run that one took
	// it over from in turn; empty for a node this run ran.
	ReusedFrom string `json:"reused_from,omitempty"`
	// NotReused says why a rerun ran this node instead of reusing the
	// earlier run's result ("failed in run R", "downstream of --from
	// train", "snapshot 42 of ml.training is gone"); empty otherwise.
	NotReused string `json:"not_reused,omitempty"`
	// Cache is the node cache's word on a node marked `cache:`: served
	// from it, or computed and why; nil for other nodes.
	Cache *NodeCache `json:"cache,omitempty"`
}

// NodeCache is how the node cache served a node.
type NodeCache struct {
	Hit bool   `json:"hit"`
	Key string `json:"key,omitempty"`
	// Run and Time are a hit's: the run that computed the result, and
	// when.
	Run  string     `json:"run,omitempty"`
	Time *time.Time `json:"time,omitempty"`
	// Reason is a miss's: what changed since the node's last entry
	// ("param epochs 2 -> 3"), "no entry", or why the lookup was skipped.
	Reason string `json:"reason,omitempty"`
}

// Note is the cache's word as the node table shows it at now:
// "cached (run R, 3 days ago)" or "computed: REASON".
func (c *NodeCache) Note(now time.Time) string {
	switch {
	case c == nil:
		return ""
	case c.Hit && c.Time != nil:
		return fmt.Sprintf("cached (run %s, %s)", c.Run, nodecache.Ago(*c.Time, now))
	case c.Hit:
		return fmt.Sprintf("cached (run %s)", c.Run)
	case c.Reason != "":
		return "cache miss: " + c.Reason
	}
	return "cache miss"
}

// Result is a run's report, returned at the end and by the state query.
type Result struct {
	ID           string         `json:"id"` // run id (the workflow id)
	Pipeline     string         `json:"pipeline"`
	Status       Status         `json:"status"`
	Error        string         `json:"error,omitempty"`
	Params       map[string]any `json:"params,omitempty"`
	ParamsDigest string         `json:"params_digest,omitempty"`
	LogicalDate  string         `json:"logical_date,omitempty"` // ${run.logical_date}
	// LogicalTime is ${run.logical_time} (RFC 3339): what a rerun starts
	// with, so that it is for the same moment. Empty in runs recorded
	// before it was kept.
	LogicalTime string `json:"logical_time,omitempty"`
	// SpecDigest identifies the spec the run resolved: "sha256:" and the
	// hex SHA-256 of its text as the worker read it. Empty in runs
	// recorded before it was kept.
	SpecDigest string `json:"spec_digest,omitempty"`
	// ReusedFrom is the earlier run a rerun reused node results of (see
	// NodeState.ReusedFrom); empty for an ordinary run.
	ReusedFrom    string      `json:"reused_from,omitempty"`
	StartedAt     time.Time   `json:"started_at"`
	EndedAt       *time.Time  `json:"ended_at,omitempty"`
	Nodes         []NodeState `json:"nodes"`
	Compensations []NodeState `json:"compensations,omitempty"`
	DryRun        bool        `json:"dry_run,omitempty"` // resolved and validated only (PipelineInput.DryRun)
	// Waiting are the wait_for conditions the run is waiting for now
	// (its own, or its nodes'); Ready are those that held.
	Waiting []Waiting `json:"waiting,omitempty"`
	Ready   []Ready   `json:"ready,omitempty"`
}

// Node returns the state of node id, or nil.
func (r *Result) Node(id string) *NodeState {
	for i := range r.Nodes {
		if r.Nodes[i].ID == id {
			return &r.Nodes[i]
		}
	}
	return nil
}

// ResultFromError extracts the Result a failed run attaches to its error
// (PipelineFailed, or InvalidPipeline for a spec that did not validate).
func ResultFromError(err error) (*Result, bool) {
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || (appErr.Type() != errtype.PipelineFailed && appErr.Type() != errtype.InvalidPipeline) || !appErr.HasDetails() {
		return nil, false
	}
	var res Result
	if appErr.Details(&res) != nil {
		return nil, false
	}
	return &res, true
}

// ResultFromCancel extracts the Result a cancelled run attaches.
func ResultFromCancel(err error) (*Result, bool) {
	var canceled *temporal.CanceledError
	if !errors.As(err, &canceled) || !canceled.HasDetails() {
		return nil, false
	}
	var res Result
	if canceled.Details(&res) != nil {
		return nil, false
	}
	return &res, true
}
