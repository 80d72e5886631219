package schedules

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/runs"
)

// Probe is a scheduled pipeline to check, with the input its schedule's
// runs get (so a param the schedule must supply is supplied).
type Probe struct {
	Pipeline string
	Params   map[string]any
	Schedule string
	Timezone string
}

// ProbeWarnings says which scheduled pipelines the workers of queue will
// not run. When no worker polls the queue, WorkerWarnings says so. Else it
// asks them: a dry run per pipeline (runs.PipelineInput.DryRun), which a
// worker answers by resolving and validating the pipeline and its params
// as a scheduled run would, without running a node, and which is deleted
// afterwards so that it is not listed among the runs. A pipeline the
// answering worker does not know, or whose params do not validate, gets a
// warning with the worker's own reason. One worker answers each probe: on
// a queue whose workers have different pipeline folders, a probe speaks
// for the one that took it.
func ProbeWarnings(ctx context.Context, c client.Client, namespace, queue string, probes []Probe, wait time.Duration) ([]string, error) {
	names := make([]string, 0, len(probes))
	for _, p := range probes {
		names = append(names, p.Pipeline)
	}
	warnings, err := WorkerWarnings(ctx, c, queue, names)
	if err != nil || len(warnings) > 0 || len(probes) == 0 {
		return warnings, err
	}
	out := make([]string, len(probes))
	var wg sync.WaitGroup
	for i, p := range probes {
		wg.Go(func() { out[i] = probe(ctx, c, namespace, queue, p, wait) })
	}
	wg.Wait()
	return slices.DeleteFunc(out, func(s string) bool { return s == "" }), nil
}

// probe runs one dry run and returns its warning, or "".
func probe(ctx context.Context, c client.Client, namespace, queue string, p Probe, wait time.Duration) string {
	id := fmt.Sprintf("%s%s/%d", runs.CheckIDPrefix, p.Pipeline, time.Now().UnixNano())
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: id, TaskQueue: queue, WorkflowExecutionTimeout: wait + time.Minute,
		StaticSummary: "retrain schedule apply: does a worker know pipeline " + p.Pipeline + "?",
	}, runs.PipelineWorkflow, runs.PipelineInput{
		Pipeline: p.Pipeline, Params: p.Params, Schedule: p.Schedule, Timezone: p.Timezone, DryRun: true,
	})
	if err != nil {
		return fmt.Sprintf("warning: cannot check pipeline %s on task queue %q: %v", p.Pipeline, queue, err)
	}
	warning := check(ctx, run, queue, p, wait)
	// Deleting a running execution terminates it first.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := c.WorkflowService().DeleteWorkflowExecution(dctx, &workflowservice.DeleteWorkflowExecutionRequest{
		Namespace: namespace, WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: run.GetRunID()},
	}); err != nil {
		warning = strings.TrimPrefix(warning+"\n", "\n") + fmt.Sprintf("warning: cannot delete the check run %s: %v", id, err)
	}
	return warning
}

// check waits for a probe run and says what its outcome means, or "".
func check(ctx context.Context, run client.WorkflowRun, queue string, p Probe, wait time.Duration) string {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	err := run.Get(wctx, nil)
	switch {
	case err == nil:
		return ""
	case wctx.Err() != nil && ctx.Err() == nil:
		return fmt.Sprintf("warning: no worker polling task queue %q answered a check of pipeline %s within %s (are they busy?)", queue, p.Pipeline, wait)
	}
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		return fmt.Sprintf("warning: cannot check pipeline %s on task queue %q: %v", p.Pipeline, queue, err)
	}
	// The worker's own reason ("pipeline "x" not found; known pipelines:
	// ..."), from the run's result in the error's details.
	reason, _, _ := strings.Cut(appErr.Error(), " (type: ")
	var res runs.Result
	if appErr.HasDetails() && appErr.Details(&res) == nil && res.Error != "" {
		reason = res.Error
	}
	return fmt.Sprintf("warning: the worker polling task queue %q cannot run pipeline %s: %s; its scheduled runs will fail until a worker with %s in its --pipelines folder polls %q",
		queue, p.Pipeline, reason, p.Pipeline, queue)
}
