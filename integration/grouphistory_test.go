package integration

// What a fan-out node's child workflow history says about its activities:
// read once here for promote_features and split alike.

import (
	"context"
	"sort"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"
)

// activityRun is one completed activity of a workflow's history: the
// attempt that completed it.
type activityRun struct {
	typ, id   string
	scheduled time.Time // first scheduled
	started   time.Time // the completing attempt's start
	took      time.Duration
	identity  string // of the worker that completed it
	attempt   int32
	result    *commonpb.Payloads
}

// decode decodes the activity's result into v.
func (a activityRun) decode(t *testing.T, v any) {
	t.Helper()
	if err := converter.GetDefaultDataConverter().FromPayloads(a.result, v); err != nil {
		t.Fatalf("%s %s result: %v", a.typ, a.id, err)
	}
}

// completedActivities reads the completed activities of workflow id's
// history, in the order they completed.
func completedActivities(t *testing.T, ctx context.Context, id string) []activityRun {
	t.Helper()
	acts := map[int64]*activityRun{}
	var out []activityRun
	it := tclient.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			a := ev.GetActivityTaskScheduledEventAttributes()
			acts[ev.GetEventId()] = &activityRun{typ: a.GetActivityType().GetName(), id: a.GetActivityId(), scheduled: ev.GetEventTime().AsTime()}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			a := ev.GetActivityTaskStartedEventAttributes()
			r := acts[a.GetScheduledEventId()]
			r.started, r.identity, r.attempt = ev.GetEventTime().AsTime(), a.GetIdentity(), a.GetAttempt()
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			a := ev.GetActivityTaskCompletedEventAttributes()
			r := acts[a.GetScheduledEventId()]
			r.took, r.result = ev.GetEventTime().AsTime().Sub(r.started), a.GetResult()
			out = append(out, *r)
		}
	}
	return out
}

// groupRun is one bucket group of a promotion or a split, as its history
// records it, with its result R.
type groupRun[R any] struct {
	activityRun
	buckets []int
	res     R
}

// groups are a node's bucket groups, by first bucket.
type groups[R any] []groupRun[R]

// groupsOf collects the completed activities of type typ as groups, with
// their results and the buckets bucketsOf reads from them.
func groupsOf[R any](t *testing.T, acts []activityRun, typ string, bucketsOf func(R) []int) groups[R] {
	t.Helper()
	var gs groups[R]
	for _, a := range acts {
		if a.typ != typ {
			continue
		}
		g := groupRun[R]{activityRun: a}
		a.decode(t, &g.res)
		g.buckets = bucketsOf(g.res)
		gs = append(gs, g)
	}
	sort.Slice(gs, func(i, j int) bool { return gs[i].buckets[0] < gs[j].buckets[0] })
	return gs
}

func (gs groups[R]) group(activityID string) *groupRun[R] {
	for i := range gs {
		if gs[i].id == activityID {
			return &gs[i]
		}
	}
	return nil
}

func (gs groups[R]) perWorker() map[string]int {
	m := map[string]int{}
	for _, g := range gs {
		m[g.identity]++
	}
	return m
}

// wantRedoneBySurvivor checks that the group whose worker (a or b) was
// killed finished on a later attempt by the other one.
func wantRedoneBySurvivor[R any](t *testing.T, gs groups[R], killed killRecord, a, b *workerProc) {
	t.Helper()
	survivor := a
	if killed.worker == a {
		survivor = b
	}
	g := gs.group(killed.activityID)
	switch {
	case g == nil:
		t.Fatalf("killed: no group with activity id %s in the history", killed.activityID)
	case g.attempt < 2 || g.identity != survivor.identity:
		t.Errorf("killed: group %v finished on attempt %d by %s; want a later attempt by the survivor %s", g.buckets, g.attempt, g.identity, survivor.identity)
	default:
		t.Logf("killed: worker %s (pid %d) SIGKILLed in group %v; the group finished on attempt %d by %s, started %.1f s after the kill (heartbeat timeout %v + retry backoff)",
			killed.worker.name, killed.worker.pid(), g.buckets, g.attempt, survivor.name, g.started.Sub(killed.at).Seconds(), pwHeartbeat)
	}
}
