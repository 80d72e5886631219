package tracing

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/nodetype"
	"github.com/retrain-ml/retrain/runs"
)

// Attribute keys retrain adds to the SDK's spans.
const (
	AttrPipeline = "retrain.pipeline"  // the pipeline's name
	AttrRunID    = "retrain.run_id"    // the run's id (its workflow id)
	AttrNode     = "retrain.node"      // the node's id in the spec
	AttrNodeType = "retrain.node_type" // the node's type
	AttrAttempt  = "retrain.attempt"   // the step's attempt, from 1
)

// attributes annotates the span the SDK's tracing interceptor opened with
// what retrain knows of the call. It reads the run's and the node's input
// contracts only for names: a run's params and a node's `with` never
// become attributes.
type attributes struct {
	interceptor.InterceptorBase
}

func (*attributes) InterceptClient(next interceptor.ClientOutboundInterceptor) interceptor.ClientOutboundInterceptor {
	i := &clientAttributes{}
	i.Next = next
	return i
}

func (*attributes) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	i := &activityAttributes{}
	i.Next = next
	return i
}

func (*attributes) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	i := &workflowAttributes{}
	i.Next = next
	return i
}

type clientAttributes struct {
	interceptor.ClientOutboundInterceptorBase
}

func (c *clientAttributes) ExecuteWorkflow(ctx context.Context, in *interceptor.ClientExecuteWorkflowInput) (client.WorkflowRun, error) {
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(attribute.String(AttrRunID, in.Options.ID))
	span.SetAttributes(argAttributes(in.Args)...)
	return c.Next.ExecuteWorkflow(ctx, in)
}

type workflowAttributes struct {
	interceptor.WorkflowInboundInterceptorBase
}

func (w *workflowAttributes) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	if span, ok := temporalotel.SpanFromWorkflowContext(ctx); ok {
		// Setting attributes touches no workflow state, so it is safe on
		// replay too (the SDK opens this span on every execution).
		span.SetAttributes(attribute.String(AttrRunID, workflow.GetInfo(ctx).WorkflowExecution.ID))
		span.SetAttributes(argAttributes(in.Args)...)
	}
	return w.Next.ExecuteWorkflow(ctx, in)
}

type activityAttributes struct {
	interceptor.ActivityInboundInterceptorBase
}

func (a *activityAttributes) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	span := trace.SpanFromContext(ctx)
	info := activity.GetInfo(ctx)
	span.SetAttributes(
		attribute.String(AttrRunID, info.WorkflowExecution.ID),
		attribute.String(AttrAttempt, strconv.Itoa(int(info.Attempt))),
	)
	// A node's input names the run itself: for a step of a child-workflow
	// node the workflow id above is RUN/NODE, not the run's.
	span.SetAttributes(argAttributes(in.Args)...)
	return a.Next.ExecuteActivity(ctx, in)
}

// argAttributes names the pipeline, run and node of a call whose first
// argument is a run's input (the Pipeline workflow) or a node's input (a
// step, or a node run as a child workflow). Other calls get none.
func argAttributes(args []any) []attribute.KeyValue {
	if len(args) == 0 {
		return nil
	}
	var out []attribute.KeyValue
	add := func(key, v string) {
		if v != "" {
			out = append(out, attribute.String(key, v))
		}
	}
	switch in := args[0].(type) {
	case runs.PipelineInput:
		add(AttrPipeline, in.Pipeline)
	case *runs.PipelineInput:
		add(AttrPipeline, in.Pipeline)
	case nodetype.Input:
		add(AttrPipeline, in.Pipeline)
		add(AttrRunID, in.RunID)
		add(AttrNode, in.Node)
		add(AttrNodeType, in.Type)
	case *nodetype.Input:
		add(AttrPipeline, in.Pipeline)
		add(AttrRunID, in.RunID)
		add(AttrNode, in.Node)
		add(AttrNodeType, in.Type)
	}
	return out
}
