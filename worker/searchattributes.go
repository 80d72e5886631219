package worker

import (
	"context"
	"log/slog"
	"maps"
	"slices"

	"github.com/retrain-ml/retrain/runs"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
)

// EnsureSearchAttributes reports whether the namespace has the search
// attributes runs set, registering the missing ones when the caller may.
// A cluster where workers lack that right still runs pipelines; their runs
// just cannot be filtered by pipeline, and the log says so once.
func EnsureSearchAttributes(ctx context.Context, c client.Client, namespace string, logger *slog.Logger) bool {
	ops := c.OperatorService()
	have, err := ops.ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		logger.Warn("cannot list search attributes; runs will not be labelled", "namespace", namespace, "error", err)
		return false
	}
	want := runs.SearchAttributes()
	missing := make(map[string]enumspb.IndexedValueType)
	for name, typ := range want {
		if _, ok := have.GetCustomAttributes()[name]; !ok {
			missing[name] = typ
		}
	}
	if len(missing) == 0 {
		return true
	}
	_, err = ops.AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: namespace, SearchAttributes: missing,
	})
	if err != nil {
		logger.Warn("cannot add search attributes; runs will not be labelled by pipeline",
			"namespace", namespace, "missing", slices.Sorted(maps.Keys(missing)), "error", err)
		return false
	}
	return true
}
