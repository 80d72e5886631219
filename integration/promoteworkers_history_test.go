package integration

// The history side of TestPromoteAcrossWorkers: what a promotion's child
// workflow history says about its groups (worker, attempt, time, result),
// and the figures docs/scaling.md uses.

import (
	"context"
	"sort"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"

	lakenodes "github.com/retrain-ml/retrain/activities/lake"
	"github.com/retrain-ml/retrain/internal/features"
)

// groupRun is one bucket group as the promotion's history records it.
type groupRun struct {
	activityID string
	buckets    []int
	identity   string // of the worker whose attempt completed it
	attempt    int32
	started    time.Time // of that attempt
	took       time.Duration
	res        features.BucketResult
}

// promotionRun is a promotion's child workflow history, digested.
type promotionRun struct {
	groups       []groupRun
	plan, commit time.Duration
	wall         time.Duration // the node, start to end
	read, wrote  int64         // bytes of data files
	// dispatch is the shortest wait of a group from scheduled to started:
	// Temporal's dispatch latency, for a group that found a free slot.
	dispatch time.Duration
}

func (p *promotionRun) group(activityID string) *groupRun {
	for i := range p.groups {
		if p.groups[i].activityID == activityID {
			return &p.groups[i]
		}
	}
	return nil
}

func (p *promotionRun) perWorker() map[string]int {
	m := map[string]int{}
	for _, g := range p.groups {
		m[g.identity]++
	}
	return m
}

// promotionHistory reads a promotion's activities from its history: the
// worker, attempt, time and result of each bucket group, and the time of
// the plan and the commit.
func promotionHistory(t *testing.T, ctx context.Context, childID string) *promotionRun {
	t.Helper()
	type scheduled struct {
		typ, id string
		at      time.Time // scheduled
		started time.Time
		ident   string
		attempt int32
	}
	acts := map[int64]*scheduled{}
	p := &promotionRun{}
	it := tclient.GetWorkflowHistory(ctx, childID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			a := ev.GetActivityTaskScheduledEventAttributes()
			acts[ev.GetEventId()] = &scheduled{typ: a.GetActivityType().GetName(), id: a.GetActivityId(), at: ev.GetEventTime().AsTime()}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			a := ev.GetActivityTaskStartedEventAttributes()
			s := acts[a.GetScheduledEventId()]
			s.started, s.ident, s.attempt = ev.GetEventTime().AsTime(), a.GetIdentity(), a.GetAttempt()
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			a := ev.GetActivityTaskCompletedEventAttributes()
			s := acts[a.GetScheduledEventId()]
			took := ev.GetEventTime().AsTime().Sub(s.started)
			switch s.typ {
			case lakenodes.PromotePlanActivity:
				p.plan += took
			case lakenodes.PromoteCommitActivity:
				p.commit += took
			case lakenodes.PromoteBucketsActivity:
				g := groupRun{activityID: s.id, identity: s.ident, attempt: s.attempt, started: s.started, took: took}
				if err := converter.GetDefaultDataConverter().FromPayloads(a.GetResult(), &g.res); err != nil {
					t.Fatalf("bucket group result: %v", err)
				}
				g.buckets = g.res.Buckets
				p.groups = append(p.groups, g)
				if wait := s.started.Sub(s.at); s.attempt == 1 && (p.dispatch == 0 || wait < p.dispatch) {
					p.dispatch = wait
				}
			}
		}
	}
	sort.Slice(p.groups, func(i, j int) bool { return p.groups[i].buckets[0] < p.groups[j].buckets[0] })
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
