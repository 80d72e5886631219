package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/retrain-ml/retrain/activities"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/nodetype"
	"github.com/retrain-ml/retrain/workflows"
)

// Option adds to what New builds beyond Config: things only Go code can
// give, such as node types.
type Option func(*options)

type options struct {
	nodeTypes []nodetype.Type
}

// WithNodeTypes adds node types of the caller's own to the worker, next to
// the built-in ones: the worker runs their nodes, and its resolver accepts
// specs that use them. A name that collides with a built-in type, or an
// activity type retrain registers itself, makes New fail.
//
// Only this worker knows these types, so it should poll a task queue of its
// own (Config.TaskQueue), or share one only with workers built the same
// way: another worker on the queue could pick up the run and refuse its
// spec, or pick up the node and have no activity for it.
func WithNodeTypes(types ...nodetype.Type) Option {
	return func(o *options) { o.nodeTypes = append(o.nodeTypes, types...) }
}

// Registry returns the node types a worker built WithNodeTypes(custom...)
// validates specs against: the built-in ones and custom. `retrain dag
// validate` knows only the built-in types; a team validates specs that use
// its own with this, e.g. `dags.Load(file, data, reg)` in a validate
// command of its own binary (see examples/customnode).
func Registry(custom ...nodetype.Type) (*dags.Registry, error) {
	extra, err := customSteps(custom)
	if err != nil {
		return nil, err
	}
	return registryOf(append(activities.Steps(activities.Deps{}), extra...))
}

func registryOf(steps []activities.Step) (*dags.Registry, error) {
	types := make([]dags.NodeType, len(steps))
	for i, s := range steps {
		types[i] = s.Type
	}
	return dags.NewRegistry(types...)
}

// customSteps turns custom node types into steps, refusing any type that
// is malformed or whose name or activity type is taken: a second
// registration of an activity type would panic in the SDK, and a type that
// shadowed a built-in would change what existing specs mean.
func customSteps(custom []nodetype.Type) ([]activities.Step, error) {
	if len(custom) == 0 {
		return nil, nil
	}
	// Names a custom type may not take, and who holds them.
	taken := map[string]string{
		workflows.ResolveActivity:  "the resolver activity",
		workflows.PipelineWorkflow: "the pipeline workflow",
	}
	for name := range activities.WorkflowActivities(activities.Deps{}) {
		taken[name] = "a promote_features activity"
	}
	for _, s := range activities.Steps(activities.Deps{}) {
		taken[s.Type.Name] = fmt.Sprintf("the built-in node type %q", s.Type.Name)
		if s.Type.Target != "" && s.Type.Target != s.Type.Name {
			taken[s.Type.Target] = fmt.Sprintf("the activity or workflow of built-in node type %q", s.Type.Name)
		}
	}
	var steps []activities.Step
	var errs []error
	for _, t := range custom {
		if err := t.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		name, target := t.NodeType.Name, t.TargetName()
		if by, ok := taken[name]; ok {
			errs = append(errs, fmt.Errorf("node type %q: the name is taken by %s; give yours another name", name, by))
			continue
		}
		if by, ok := taken[target]; ok {
			errs = append(errs, fmt.Errorf("node type %q: activity type %q is taken by %s; set another Target", name, target, by))
			continue
		}
		taken[name] = fmt.Sprintf("the custom node type %q", name)
		if target != name {
			taken[target] = fmt.Sprintf("the activity of custom node type %q", name)
		}
		steps = append(steps, activities.Step{Type: t.NodeType, Run: adapt(t.Run)})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("custom node types: %w", err)
	}
	return steps, nil
}

// adapt runs a public node function as a built-in step, so it gets the same
// activity wrapper: heartbeats, attempt numbers and times on its result.
func adapt(run nodetype.Func) activities.NodeFunc {
	return func(ctx context.Context, in activities.NodeInput) (map[string]any, error) {
		return run(ctx, nodetype.Input{Pipeline: in.Pipeline, RunID: in.RunID, Node: in.Node, Type: in.Type, With: in.With})
	}
}
