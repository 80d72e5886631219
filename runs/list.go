package runs

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
)

// Statuses a run can end in besides the ones its Result reports: Temporal
// ended it without the interpreter getting a say.
const (
	StatusTerminated Status = "terminated"
	StatusTimedOut   Status = "timed_out"
)

// Search attribute names List reads and filters on. The schedule and
// logical-date attributes are read by name, so runs recorded before they
// existed (or a namespace without them) still list.
const (
	scheduleAttr    = "RetrainSchedule"
	logicalDateAttr = "RetrainLogicalDate"
	// scheduledByAttr is Temporal's own: the schedule that started a run.
	scheduledByAttr = "TemporalScheduledById"
	// scheduledStartAttr is the nominal time of a scheduled run's action.
	scheduledStartAttr = "TemporalScheduledStartTime"
)

// gateType is the gate node type's name, whose "passed" output is a run's
// verdict. Spelled here so that listing runs does not link the node types.
const gateType = "gate"

// ListOptions selects runs. Zero values select everything.
type ListOptions struct {
	Pipeline string    // only runs of this pipeline
	Status   Status    // running, succeeded, failed (also terminated and timed out), cancelled, terminated, timed_out
	Since    time.Time // only runs started at or after this time
	Schedule string    // only runs this schedule started
	Limit    int       // at most this many runs, newest first (default 20)
	// Namespace is the client's namespace (default "default"): List reads
	// the first history event of runs whose visibility record lacks the
	// logical date, and that call names the namespace.
	Namespace string
	// Summary skips reading each run's result or state: no gate verdict,
	// and no logical date for runs that lack the search attribute. One
	// visibility call instead of one more call per run.
	Summary bool
}

// RunInfo is one run as List reports it.
type RunInfo struct {
	ID          string     `json:"id"`     // run id (workflow id)
	RunID       string     `json:"run_id"` // Temporal run id of this execution
	Pipeline    string     `json:"pipeline"`
	Schedule    string     `json:"schedule,omitempty"`
	LogicalDate string     `json:"logical_date,omitempty"`
	Status      Status     `json:"status"`
	StartedAt   time.Time  `json:"started_at"`
	EndedAt     *time.Time `json:"ended_at,omitempty"`
	// Gate is the verdict of the run's gate nodes: passed, rejected,
	// failed, running, pending, skipped or cancelled ("id=verdict, ..."
	// with several gates); empty without a gate or when unknown.
	Gate string `json:"gate,omitempty"`
	// Deployed names what the run's deploy nodes moved an alias to
	// (model@version, "(rolled back)" when a compensation moved it back);
	// empty when it deployed nothing or when unknown.
	Deployed string `json:"deployed,omitempty"`
	// ReusedFrom is the earlier run a rerun took node results over from
	// (Result.ReusedFrom); empty for an ordinary run or when unknown.
	ReusedFrom string `json:"reused_from,omitempty"`
	Error      string `json:"error,omitempty"`
	// Waiting says what a waiting run waits for (Waiting.Text); empty
	// when it waits for nothing or when unknown.
	Waiting string `json:"waiting,omitempty"`

	// nominal is the schedule action's nominal time of a run a schedule
	// started (TemporalScheduledStartTime): its logical time, even when
	// the run failed before it labelled itself with its logical date.
	nominal time.Time
}

// Duration is how long the run took, or has taken so far at now.
func (r RunInfo) Duration(now time.Time) time.Duration {
	if r.EndedAt != nil {
		return r.EndedAt.Sub(r.StartedAt)
	}
	return now.Sub(r.StartedAt)
}

// Query returns the visibility query for o.
func (o ListOptions) Query() (string, error) {
	terms := []string{fmt.Sprintf("WorkflowType = %s", quote(PipelineWorkflow)),
		// A run that continued as new lists as its latest execution only.
		"ExecutionStatus != 'ContinuedAsNew'",
		// Checks are not runs; they are deleted, but the server may list
		// one that closed just as it was deleted.
		fmt.Sprintf("WorkflowId NOT STARTS_WITH %s", quote(CheckIDPrefix))}
	if o.Pipeline != "" {
		terms = append(terms, fmt.Sprintf("%s = %s", PipelineKey.GetName(), quote(o.Pipeline)))
	}
	if o.Status != "" {
		st, err := statusTerm(o.Status)
		if err != nil {
			return "", err
		}
		terms = append(terms, st)
	}
	if !o.Since.IsZero() {
		terms = append(terms, fmt.Sprintf("StartTime >= %s", quote(o.Since.UTC().Format(time.RFC3339Nano))))
	}
	if o.Schedule != "" {
		terms = append(terms, fmt.Sprintf("(%s = %s OR %s = %s)", scheduleAttr, quote(o.Schedule), scheduledByAttr, quote(o.Schedule)))
	}
	return strings.Join(terms, " AND "), nil
}

func statusTerm(s Status) (string, error) {
	switch s {
	case StatusRunning:
		return "ExecutionStatus = 'Running'", nil
	case StatusSucceeded:
		return "ExecutionStatus = 'Completed'", nil
	case StatusFailed:
		return "ExecutionStatus IN ('Failed', 'Terminated', 'TimedOut')", nil
	case StatusCancelled:
		return "ExecutionStatus = 'Canceled'", nil
	case StatusTerminated:
		return "ExecutionStatus = 'Terminated'", nil
	case StatusTimedOut:
		return "ExecutionStatus = 'TimedOut'", nil
	}
	return "", fmt.Errorf("unknown run status %q: want running, succeeded, failed, cancelled, terminated or timed_out", s)
}

// quote is a visibility-query string literal.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// List returns runs from Temporal visibility, newest first: running and
// closed ones, with their logical date and gate verdict. Visibility is
// eventually consistent: a run started a moment ago may not be listed yet.
func List(ctx context.Context, c client.Client, o ListOptions) ([]RunInfo, error) {
	query, err := o.Query()
	if err != nil {
		return nil, err
	}
	limit := o.Limit
	if limit <= 0 {
		limit = 20
	}
	var execs []*workflowpb.WorkflowExecutionInfo
	var token []byte
	for len(execs) < limit {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: query, PageSize: int32(min(limit-len(execs), 1000)), NextPageToken: token,
		})
		if err != nil {
			if strings.Contains(err.Error(), scheduleAttr) && o.Schedule != "" {
				// A query naming an attribute the namespace lacks fails.
				return nil, fmt.Errorf("list runs: %w (does the namespace have the %s search attribute? a worker of this version registers it)", err, scheduleAttr)
			}
			return nil, fmt.Errorf("list runs (%s): %w", query, err)
		}
		execs = append(execs, resp.GetExecutions()...)
		token = resp.GetNextPageToken()
		if len(token) == 0 {
			break
		}
	}
	if len(execs) > limit {
		execs = execs[:limit]
	}
	out := make([]RunInfo, len(execs))
	for i, e := range execs {
		out[i] = infoOf(e)
	}
	slices.SortStableFunc(out, func(a, b RunInfo) int { return b.StartedAt.Compare(a.StartedAt) })
	if !o.Summary {
		addDetails(ctx, c, cmp.Or(o.Namespace, "default"), out)
	}
	return out, nil
}

// infoOf is what visibility alone says about a run.
func infoOf(e *workflowpb.WorkflowExecutionInfo) RunInfo {
	attrs := e.GetSearchAttributes().GetIndexedFields()
	r := RunInfo{
		ID:          e.GetExecution().GetWorkflowId(),
		RunID:       e.GetExecution().GetRunId(),
		Pipeline:    attrString(attrs, PipelineKey.GetName()),
		Schedule:    attrString(attrs, scheduleAttr),
		LogicalDate: logicalDate(attrString(attrs, logicalDateAttr)),
		Status:      statusOf(e.GetStatus()),
		StartedAt:   e.GetStartTime().AsTime(),
	}
	if r.Schedule == "" {
		r.Schedule = attrString(attrs, scheduledByAttr)
	}
	if p := attrs[scheduledStartAttr]; p != nil {
		_ = converter.GetDefaultDataConverter().FromPayload(p, &r.nominal)
	}
	if e.GetCloseTime() != nil && r.Status != StatusRunning {
		end := e.GetCloseTime().AsTime()
		r.EndedAt = &end
	}
	return r
}

func attrString(attrs map[string]*commonpb.Payload, name string) string {
	p, ok := attrs[name]
	if !ok {
		return ""
	}
	var s string
	if converter.GetDefaultDataConverter().FromPayload(p, &s) == nil {
		return s
	}
	var list []string // a keyword list holds one value here
	if converter.GetDefaultDataConverter().FromPayload(p, &list) == nil && len(list) > 0 {
		return list[0]
	}
	return ""
}

// logicalDate shows a logical time as its date, in the time's own zone (the
// schedule's), and a date as it is.
func logicalDate(s string) string {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.Format(time.DateOnly)
	}
	return s
}

func statusOf(s enumspb.WorkflowExecutionStatus) Status {
	switch s {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		return StatusRunning
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		return StatusSucceeded
	case enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:
		return StatusCancelled
	case enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED:
		return StatusTerminated
	case enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
		return StatusTimedOut
	}
	return StatusFailed
}

// detailTimeout bounds one run's result or state query: a running run
// whose workers are all down answers no query, and the list must not wait
// on it.
const detailTimeout = 3 * time.Second

// addDetails fills the gate verdict (and, where visibility lacks it, the
// logical date) from each listed run's result or state, a few at a time.
func addDetails(ctx context.Context, c client.Client, namespace string, list []RunInfo) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range list {
		wg.Add(1)
		sem <- struct{}{}
		go func(r *RunInfo) {
			defer func() { <-sem; wg.Done() }()
			dctx, cancel := context.WithTimeout(ctx, detailTimeout)
			defer cancel()
			if r.LogicalDate == "" {
				r.LogicalDate = inputLogicalDate(dctx, c, namespace, *r)
			}
			var res *Result
			var err error
			switch r.Status {
			case StatusRunning:
				res, err = queryState(dctx, c, r.ID)
			case StatusTerminated, StatusTimedOut:
				return // no Result: the interpreter never finished
			default:
				res, err = resultOf(dctx, c, r.ID, r.RunID)
			}
			if err != nil || res == nil {
				return
			}
			// Temporal knows a waiting run as running and a skipped
			// one as completed: the run's own word is finer.
			if res.Status == StatusWaiting || res.Status == StatusSkipped {
				r.Status = res.Status
			}
			if len(res.Waiting) > 0 {
				texts := make([]string, len(res.Waiting))
				for i, w := range res.Waiting {
					texts[i] = w.Text(time.Now())
				}
				r.Waiting = strings.Join(texts, "; ")
			}
			r.Gate = Verdict(res)
			r.Deployed = Deployed(res)
			r.ReusedFrom = res.ReusedFrom
			if r.Error == "" {
				r.Error = res.Error
			}
		}(&list[i])
	}
	wg.Wait()
}

// resultOf reads the result of one closed execution.
func resultOf(ctx context.Context, c client.Client, id, runID string) (*Result, error) {
	var res Result
	err := c.GetWorkflow(ctx, id, runID).Get(ctx, &res)
	if err == nil {
		return &res, nil
	}
	if r, ok := ResultFromError(err); ok {
		return r, nil
	}
	if r, ok := ResultFromCancel(err); ok {
		return r, nil
	}
	return nil, err
}

// inputLogicalDate is the logical date of a run whose visibility record
// lacks it: the input's logical_date, else the nominal time of the
// schedule action that started it, else the start date, in the input's
// time zone (UTC by default). It reads the first history event only.
func inputLogicalDate(ctx context.Context, c client.Client, namespace string, r RunInfo) string {
	resp, err := c.WorkflowService().GetWorkflowExecutionHistory(ctx, &workflowservice.GetWorkflowExecutionHistoryRequest{
		Namespace:       namespace,
		Execution:       &commonpb.WorkflowExecution{WorkflowId: r.ID, RunId: r.RunID},
		MaximumPageSize: 1,
	})
	if err != nil {
		return ""
	}
	var in PipelineInput
	for _, ev := range resp.GetHistory().GetEvents() {
		attrs := ev.GetWorkflowExecutionStartedEventAttributes()
		if attrs == nil || len(attrs.GetInput().GetPayloads()) == 0 {
			continue
		}
		_ = converter.GetDefaultDataConverter().FromPayload(attrs.GetInput().GetPayloads()[0], &in)
	}
	if in.LogicalDate != "" {
		return logicalDate(in.LogicalDate)
	}
	loc := time.UTC
	if in.Timezone != "" {
		if l, err := time.LoadLocation(in.Timezone); err == nil {
			loc = l
		}
	}
	if !r.nominal.IsZero() {
		return r.nominal.In(loc).Format(time.DateOnly)
	}
	return r.StartedAt.In(loc).Format(time.DateOnly)
}

// Verdict summarizes a run's gate nodes: "passed", "rejected" (the gate
// ran and said no), or the gate's status when it did not decide; with
// several gates, "id=verdict" pairs. Empty for a run without a gate.
func Verdict(res *Result) string {
	var parts []string
	var gates int
	for _, n := range res.Nodes {
		if n.Type == gateType {
			gates++
		}
	}
	for _, n := range res.Nodes {
		if n.Type != gateType {
			continue
		}
		v := string(n.Status)
		if n.Status == NodeSucceeded {
			v = "passed"
			if p, ok := n.Outputs["passed"].(bool); ok && !p {
				v = "rejected"
			}
		}
		if gates > 1 {
			v = n.ID + "=" + v
		}
		parts = append(parts, v)
	}
	return strings.Join(parts, ", ")
}

// deployType and rollbackModelType are the node types whose outputs say
// what a run deployed (activities/models).
const (
	deployType        = "deploy"
	canaryType        = "canary"
	rollbackModelType = "rollback_model"
)

// Deployed says what a run's deploy and canary nodes put behind their
// aliases (a canary's production alias when it promoted):
// "ctr@v3", or "ctr@v3 (rolled back)" when an on_failure rollback_model
// moved the alias back; several deploys are joined with ", ". A deploy
// that found the alias already there moved nothing and is left out.
func Deployed(res *Result) string {
	rolledBack := map[string]bool{}
	for _, c := range res.Compensations {
		if c.Type == rollbackModelType && c.Status == NodeSucceeded {
			rolledBack[c.Compensates] = true
		}
	}
	var parts []string
	for _, n := range res.Nodes {
		if n.Type != deployType && n.Type != canaryType || n.Status != NodeSucceeded {
			continue
		}
		ref, _ := n.Outputs["ref"].(string)
		if by, _ := n.Outputs["superseded_by"].(string); by != "" && ref != "" {
			// Registered, but production named a later date's version.
			parts = append(parts, ref+" (superseded by "+by+")")
			continue
		}
		if moved, _ := n.Outputs["moved"].(bool); !moved || ref == "" {
			continue
		}
		if forced, _ := n.Outputs["forced"].(bool); forced {
			ref += " (forced)"
		}
		if rolledBack[n.ID] {
			ref += " (rolled back)"
		}
		parts = append(parts, ref)
	}
	return strings.Join(parts, ", ")
}
