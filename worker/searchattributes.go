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

// SearchAttributeSupport says which of retrain's search attributes runs
// may set: a workflow that upserts one its namespace lacks fails every
// workflow task, so it sets only those the namespace has.
type SearchAttributeSupport struct {
	Pipeline bool // RetrainPipeline and RetrainParamsDigest
	Run      bool // RetrainSchedule and RetrainLogicalDate, added later
}

// EnsureSearchAttributes reports which search attributes runs may set,
// registering the missing ones when the caller may. A cluster where
// workers lack that right still runs pipelines; their runs just cannot be
// filtered by what the namespace lacks, and the log says so once. A
// namespace set up for an older retrain may have the pipeline attributes
// but not the newer ones: runs then keep their pipeline labels.
func EnsureSearchAttributes(ctx context.Context, c client.Client, namespace string, logger *slog.Logger) SearchAttributeSupport {
	ops := c.OperatorService()
	have, err := ops.ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		logger.Warn("cannot list search attributes; runs will not be labelled", "namespace", namespace, "error", err)
		return SearchAttributeSupport{}
	}
	missing := make(map[string]enumspb.IndexedValueType)
	for name, typ := range runs.SearchAttributes() {
		if _, ok := have.GetCustomAttributes()[name]; !ok {
			missing[name] = typ
		}
	}
	if len(missing) == 0 {
		return SearchAttributeSupport{Pipeline: true, Run: true}
	}
	_, err = ops.AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: namespace, SearchAttributes: missing,
	})
	if err == nil {
		return SearchAttributeSupport{Pipeline: true, Run: true}
	}
	support := supportWithout(missing)
	logger.Warn("cannot add search attributes; runs will not be labelled by them",
		"namespace", namespace, "missing", slices.Sorted(maps.Keys(missing)), "error", err)
	return support
}

// supportWithout is what runs may set when the namespace lacks missing.
func supportWithout(missing map[string]enumspb.IndexedValueType) SearchAttributeSupport {
	lacks := func(names ...string) bool {
		for _, n := range names {
			if _, ok := missing[n]; ok {
				return true
			}
		}
		return false
	}
	return SearchAttributeSupport{
		Pipeline: !lacks(runs.PipelineKey.GetName(), runs.ParamsDigestKey.GetName()),
		Run:      !lacks(runs.RunSearchAttributes()...),
	}
}
