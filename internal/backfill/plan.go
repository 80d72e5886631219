package backfill

import (
	"fmt"
	"sort"
	"strings"
)

// GroupBuckets splits the buckets that have rows into at most groups
// groups of about equal row counts, one promotion activity each. Groups
// are deterministic for the same input (the workflow replays them) and
// list their buckets in ascending order.
func GroupBuckets(rows map[int]int64, groups int) [][]int {
	buckets := make([]int, 0, len(rows))
	for b := range rows {
		buckets = append(buckets, b)
	}
	if len(buckets) == 0 {
		return nil
	}
	groups = max(1, min(groups, len(buckets)))
	// Longest processing time first: the biggest bucket goes to the
	// lightest group so far; ties by bucket number keep it deterministic.
	sort.Slice(buckets, func(i, j int) bool {
		if rows[buckets[i]] != rows[buckets[j]] {
			return rows[buckets[i]] > rows[buckets[j]]
		}
		return buckets[i] < buckets[j]
	})
	out := make([][]int, groups)
	load := make([]int64, groups)
	for _, b := range buckets {
		g := 0
		for i := 1; i < groups; i++ {
			if load[i] < load[g] {
				g = i
			}
		}
		out[g] = append(out[g], b)
		load[g] += rows[b]
	}
	for _, g := range out {
		sort.Ints(g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

// StagingTableName is the default staging table of a stage-1 job: in the
// training table's namespace, named for the training table and the
// feature table, so that jobs staging different feature groups for one
// training table never write the same table.
func StagingTableName(training, feature string) string {
	ns, name := training, training
	if i := strings.LastIndexByte(training, '.'); i >= 0 {
		ns, name = training[:i], training[i+1:]
	}
	return fmt.Sprintf("%s.%s__stage__%s", ns, name, strings.ReplaceAll(feature, ".", "_"))
}
