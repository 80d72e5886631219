// Package noop is the `noop` node type: it does nothing and outputs its
// `with` block, which makes it a join point and a place to name values.
package noop

import (
	"context"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/nodetype"
)

// Name is the node type's name.
const Name = "noop"

// Type returns the noop node type.
func Type() nodetype.Type {
	return nodetype.New(dags.NodeType{
		Name:     Name,
		Doc:      "Does nothing; outputs its `with` values unchanged (a join point, or a place to name values).",
		OpenWith: true,
	}, func(_ context.Context, in nodetype.Input, with map[string]any) (map[string]any, error) {
		return with, nil
	})
}
