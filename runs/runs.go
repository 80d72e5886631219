// Package runs is the Go API for starting and watching pipeline runs from
// another service. It is a thin layer over the Temporal client: a run is a
// Pipeline workflow execution, and its id is the workflow id.
//
//	c, _ := client.Dial(client.Options{HostPort: "temporal:7233"})
//	run, err := Start(ctx, c, Request{Pipeline: "ctr-retrain", Params: map[string]any{"date": "2026-11-20"}})
//	res, err := Wait(ctx, c, run.ID, nil)
package runs

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"gopkg.in/yaml.v3"
)

// DefaultTaskQueue is the queue retrain workers poll unless told otherwise.
const DefaultTaskQueue = "retrain"

// Request starts a run of a named pipeline or of a whole spec.
type Request struct {
	Pipeline    string         // a pipeline the workers know, by name
	Spec        []byte         // or a whole spec (YAML)
	SpecFile    string         // the spec's file name, for error messages
	Params      map[string]any // values for the spec's params
	Parallelism int            // overrides the spec's parallelism when > 0
	ID          string         // run id; generated from the pipeline name when empty
	TaskQueue   string         // default DefaultTaskQueue

	// LogicalDate is the date (YYYY-MM-DD) or time (RFC 3339) the run is
	// for, ${run.logical_date}; empty: its start time. Timezone is the
	// zone the logical date is taken in (default UTC).
	LogicalDate string
	Timezone    string

	// NoCache recomputes every cached node (their fresh results replace
	// the cache's entries); Refresh recomputes the nodes it names.
	NoCache bool
	Refresh []string
}

// Run identifies a started run.
type Run struct {
	ID    string // workflow id
	RunID string // Temporal run id of this execution
}

// Start starts a run and returns at once.
func Start(ctx context.Context, c client.Client, req Request) (Run, error) {
	in := PipelineInput{Pipeline: req.Pipeline, SpecFile: req.SpecFile, Params: req.Params, Parallelism: req.Parallelism,
		LogicalDate: req.LogicalDate, Timezone: req.Timezone, NoCache: req.NoCache, Refresh: req.Refresh}
	name := req.Pipeline
	if len(req.Spec) > 0 {
		spec, err := json.Marshal(string(req.Spec))
		if err != nil {
			return Run{}, fmt.Errorf("encode spec: %w", err)
		}
		in.Spec = spec
		if name == "" {
			name = "pipeline"
		}
	}
	id := req.ID
	if id == "" {
		id = NewID(name)
	}
	queue := req.TaskQueue
	if queue == "" {
		queue = DefaultTaskQueue
	}
	summary := runSummary(req)
	we, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:        id,
		TaskQueue: queue,
		// The Web UI's Summary of the run; its current details show the nodes.
		StaticSummary:            summary,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
	}, PipelineWorkflow, in)
	if err != nil {
		return Run{}, fmt.Errorf("start run %s: %w", id, err)
	}
	return Run{ID: we.GetID(), RunID: we.GetRunID()}, nil
}

// runSummary is a run's summary in the Web UI: its pipeline's name, and
// for a run of a spec the file it came from ("pipeline hello (spec
// hello.yaml)"). The spec is read leniently for its name only: one that
// does not parse is the resolver's to report.
func runSummary(req Request) string {
	if req.Pipeline != "" {
		return "pipeline " + req.Pipeline
	}
	from := "spec " + cmp.Or(req.SpecFile, "given inline")
	var head struct {
		Name string `yaml:"name"`
	}
	if yaml.Unmarshal(req.Spec, &head) != nil || head.Name == "" {
		return from
	}
	return fmt.Sprintf("pipeline %s (%s)", head.Name, from)
}

// NewID returns a fresh run id for a pipeline: its name, the UTC time and a
// random suffix, so ids sort by start time and never collide.
func NewID(pipeline string) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%s-%s", pipeline, time.Now().UTC().Format("20060102-150405"), hex.EncodeToString(b[:]))
}

// State asks a running run for its state. For a closed run it returns the
// final result instead.
func State(ctx context.Context, c client.Client, id string) (*Result, error) {
	closed, err := isClosed(ctx, c, id)
	if err != nil {
		return nil, err
	}
	if closed {
		return result(ctx, c, id)
	}
	return queryState(ctx, c, id)
}

// isClosed reports whether the run has ended, however it ended.
func isClosed(ctx context.Context, c client.Client, id string) (bool, error) {
	desc, err := c.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return false, fmt.Errorf("run %s: %w", id, err)
	}
	return desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, nil
}

// queryState asks a running run for its Result so far.
func queryState(ctx context.Context, c client.Client, id string) (*Result, error) {
	v, err := c.QueryWorkflow(ctx, id, "", StateQuery)
	if err != nil {
		return nil, fmt.Errorf("query run %s: %w", id, err)
	}
	var res Result
	if err := v.Get(&res); err != nil {
		return nil, fmt.Errorf("decode state of run %s: %w", id, err)
	}
	return &res, nil
}

// Wait polls the run until it closes and returns its result; progress, when
// not nil, is called with every state seen on the way. A failed or cancelled
// run returns its Result and a nil error: the status says how it ended.
func Wait(ctx context.Context, c client.Client, id string, progress func(*Result)) (*Result, error) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		// Describe-then-Get instead of one long-polling Get: Get on a run
		// that closed during the poll has been seen to return ~20 s late.
		closed, err := isClosed(ctx, c, id)
		if err != nil {
			return nil, err
		}
		if closed {
			return result(ctx, c, id)
		}
		if progress != nil {
			if res, err := queryState(ctx, c, id); err == nil {
				progress(res)
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// result reads the result of a closed run, including failed ones, whose
// Result rides on the workflow error.
func result(ctx context.Context, c client.Client, id string) (*Result, error) {
	res, err := resultOf(ctx, c, id, "")
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", id, err)
	}
	return res, nil
}
