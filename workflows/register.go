package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/activities"
)

// Registry is the part of a Temporal worker that workflows register with.
type Registry interface {
	RegisterWorkflowWithOptions(w any, options workflow.RegisterOptions)
}

// Register registers every workflow of this package under its public name.
func Register(r Registry) {
	r.RegisterWorkflowWithOptions(Pipeline, workflow.RegisterOptions{Name: PipelineWorkflow})
	r.RegisterWorkflowWithOptions(PromoteFeatures, workflow.RegisterOptions{Name: activities.PromoteWorkflow})
	r.RegisterWorkflowWithOptions(Gate, workflow.RegisterOptions{Name: activities.GateWorkflow})
}
