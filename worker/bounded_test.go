package worker

import (
	"runtime"
	"strings"
	"testing"

	lakenode "github.com/retrain-ml/retrain/activities/lake"
)

// TestBoundedActivities: the built-in bounded activities get GOMAXPROCS
// slots unless --activity-concurrency names them, by activity type or by
// node type; a name that is neither, or a limit below 1, stops the worker.
func TestBoundedActivities(t *testing.T) {
	types := builtin(deps{})
	limits := func(set map[string]int) map[string]int {
		t.Helper()
		bs, err := boundedActivities(types, set)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, b := range bs {
			if b.fn == nil {
				t.Errorf("bounded activity %s has no function", b.name)
			}
			out[b.name] = b.limit
		}
		return out
	}
	procs := runtime.GOMAXPROCS(0)
	got := limits(nil)
	if got[lakenode.PromoteBucketsActivity] != procs {
		t.Errorf("default limits %v: want %s at GOMAXPROCS (%d)", got, lakenode.PromoteBucketsActivity, procs)
	}
	got = limits(map[string]int{"promote_features": 3})
	if got[lakenode.PromoteBucketsActivity] != 3 {
		t.Errorf("by node type: limits %v, want %s=3", got, lakenode.PromoteBucketsActivity)
	}
	// The activity type's own limit wins over its node type's.
	got = limits(map[string]int{"promote_features": 3, lakenode.PromoteBucketsActivity: 1})
	if got[lakenode.PromoteBucketsActivity] != 1 {
		t.Errorf("by activity type: limits %v, want %s=1", got, lakenode.PromoteBucketsActivity)
	}
	for _, c := range []struct {
		set  map[string]int
		want string
	}{
		{map[string]int{"PromoteBuckets": 2}, `no bounded activity or node type "PromoteBuckets"`},
		{map[string]int{"train": 2}, `no bounded activity or node type "train"`},
		{map[string]int{lakenode.PromoteBucketsActivity: 0}, "want at least 1"},
	} {
		if _, err := boundedActivities(types, c.set); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want %q", c.set, err, c.want)
		}
	}
}
