package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/runs"
)

// Registry is the part of a Temporal worker that workflows register with.
type Registry interface {
	RegisterWorkflowWithOptions(w any, options workflow.RegisterOptions)
}

// Register registers the Pipeline workflow under its public name. Node
// types that run as child workflows (gate, promote_features) come with
// their own; the worker registers those from the node types.
func Register(r Registry) {
	r.RegisterWorkflowWithOptions(Pipeline, workflow.RegisterOptions{Name: runs.PipelineWorkflow})
	r.RegisterWorkflowWithOptions(ForeachChunk, workflow.RegisterOptions{Name: ForeachChunkWorkflow})
}
