package worker

import (
	"errors"
	"fmt"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/nodetype"
	"github.com/retrain-ml/retrain/runs"
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
	extra, err := customTypes(custom)
	if err != nil {
		return nil, err
	}
	return registryOf(append(builtin(deps{}), extra...))
}

func registryOf(types []nodetype.Type) (*dags.Registry, error) {
	nts := make([]dags.NodeType, len(types))
	for i, t := range types {
		nts[i] = t.NodeType
	}
	return dags.NewRegistry(nts...)
}

// customTypes checks custom node types, refusing any type that is
// malformed, runs as a workflow, or whose name or activity type is taken: a
// second registration of an activity type would panic in the SDK, and a
// type that shadowed a built-in would change what existing specs mean.
func customTypes(custom []nodetype.Type) ([]nodetype.Type, error) {
	if len(custom) == 0 {
		return nil, nil
	}
	// Names a custom type may not take, and who holds them.
	taken := map[string]string{
		runs.ResolveActivity:         "the resolver activity",
		runs.PipelineWorkflow:        "the pipeline workflow",
		nodetype.CacheLookupActivity: "the node cache's lookup activity",
		nodetype.CacheStoreActivity:  "the node cache's store activity",
		runs.VerifyReuseActivity:     "the rerun's check of reused outputs",
		runs.LoadReuseActivity:       "the rerun's read of the run it reruns",
	}
	for _, t := range builtin(deps{}) {
		for name := range t.Activities {
			taken[name] = fmt.Sprintf("an activity of the built-in node type %q", t.NodeType.Name)
		}
		taken[t.NodeType.Name] = fmt.Sprintf("the built-in node type %q", t.NodeType.Name)
		if target := t.TargetName(); target != t.NodeType.Name {
			taken[target] = fmt.Sprintf("the activity or workflow of built-in node type %q", t.NodeType.Name)
		}
	}
	var types []nodetype.Type
	var errs []error
	for _, t := range custom {
		if err := t.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if t.NodeType.Kind == dags.KindWorkflow {
			errs = append(errs, fmt.Errorf("node type %q: a custom node type runs as an activity (its Kind must be empty or %q)", t.NodeType.Name, dags.KindActivity))
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
		types = append(types, t)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("custom node types: %w", err)
	}
	return types, nil
}
