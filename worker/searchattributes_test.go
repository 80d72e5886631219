package worker

import (
	"testing"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/retrain-ml/retrain/runs"
)

// A namespace that lacks only the newer attributes keeps the pipeline
// labels; one that lacks the pipeline's gets neither set wrongly.
func TestSupportWithout(t *testing.T) {
	kw := enumspb.INDEXED_VALUE_TYPE_KEYWORD
	for _, tc := range []struct {
		missing []string
		want    SearchAttributeSupport
	}{
		{nil, SearchAttributeSupport{Pipeline: true, Run: true}},
		{runs.RunSearchAttributes(), SearchAttributeSupport{Pipeline: true}},
		{[]string{runs.LogicalDateKey.GetName()}, SearchAttributeSupport{Pipeline: true}},
		{[]string{runs.PipelineKey.GetName()}, SearchAttributeSupport{Run: true}},
		{[]string{runs.ParamsDigestKey.GetName(), runs.ScheduleKey.GetName()}, SearchAttributeSupport{}},
	} {
		m := map[string]enumspb.IndexedValueType{}
		for _, n := range tc.missing {
			m[n] = kw
		}
		if got := supportWithout(m); got != tc.want {
			t.Errorf("missing %v: got %+v, want %+v", tc.missing, got, tc.want)
		}
	}
	if len(runs.SearchAttributes()) != 4 {
		t.Errorf("SearchAttributes: %v", runs.SearchAttributes())
	}
}
