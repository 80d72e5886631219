package integration

// The history side of TestPromoteAcrossWorkers: what a promotion's child
// workflow history says about its groups (worker, attempt, time, result),
// and the figures docs/scaling.md uses.

import (
	"context"
	"testing"
	"time"

	lakenodes "github.com/retrain-ml/retrain/activities/lake"
	"github.com/retrain-ml/retrain/internal/features"
)

// promotionRun is a promotion's child workflow history, digested.
type promotionRun struct {
	groups[features.BucketResult]
	plan, commit time.Duration
	wall         time.Duration // the node, start to end
	read, wrote  int64         // bytes of data files
	// dispatch is the shortest wait of a group from scheduled to started:
	// Temporal's dispatch latency, for a group that found a free slot.
	dispatch time.Duration
}

// promotionHistory reads a promotion's activities from its history: the
// worker, attempt, time and result of each bucket group, and the time of
// the plan and the commit.
func promotionHistory(t *testing.T, ctx context.Context, childID string) *promotionRun {
	t.Helper()
	acts := completedActivities(t, ctx, childID)
	p := &promotionRun{groups: groupsOf(t, acts, lakenodes.PromoteBucketsActivity, func(r features.BucketResult) []int { return r.Buckets })}
	for _, a := range acts {
		switch a.typ {
		case lakenodes.PromotePlanActivity:
			p.plan += a.took
		case lakenodes.PromoteCommitActivity:
			p.commit += a.took
		case lakenodes.PromoteBucketsActivity:
			if wait := a.started.Sub(a.scheduled); a.attempt == 1 && (p.dispatch == 0 || wait < p.dispatch) {
				p.dispatch = wait
			}
		}
	}
	return p
}

// log prints a promotion's figures: per group its worker, attempt, rows,
// partitions, time and the part of it spent joining; per worker its
// groups; plan, commit and the node's wall time.
func (p *promotionRun) log(t *testing.T, name string, names map[string]string) {
	t.Helper()
	var rows int64
	var took, join time.Duration
	for _, g := range p.groups {
		t.Logf("%s: group %v on %s attempt %d: %d rows, %d partitions, %d files, %.2f s (join %.2f s)",
			name, g.buckets, names[g.identity], g.attempt, g.res.Rows, g.res.Partitions, g.res.Files, g.took.Seconds(), g.res.JoinTime.Seconds())
		rows += g.res.Rows
		took += g.took
		join += g.res.JoinTime
	}
	per := map[string]int{}
	for id, n := range p.perWorker() {
		per[names[id]] = n
	}
	n := time.Duration(len(p.groups))
	t.Logf("%s: groups per worker %v; per group %.2f s mean (join %.2f s, read+write+overhead %.2f s), %.0f rows/s per group; plan %.2f s, commit %.2f s, node %.2f s",
		name, per, (took / n).Seconds(), (join / n).Seconds(), ((took - join) / n).Seconds(), float64(rows)/took.Seconds(), p.plan.Seconds(), p.commit.Seconds(), p.wall.Seconds())
	t.Logf("%s: data files read %.1f MB (%.0f B/row), written %.1f MB (%.0f B/row); dispatch %.0f ms",
		name, float64(p.read)/1e6, float64(p.read)/float64(rows), float64(p.wrote)/1e6, float64(p.wrote)/float64(rows), p.dispatch.Seconds()*1000)
}
