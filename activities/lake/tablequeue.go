package lake

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/internal/lake"
)

// The table queue: promotions into one training table whose date ranges
// overlap take turns, first come first served, instead of all doing their
// work and all but one losing the commit (issue 20: a 10-date backfill at
// --max-parallel 10 lost half its runs that way). Promotions of disjoint
// ranges go on at once; their commits re-base on each other
// (features.CommitPromotion).
//
// The queue is a workflow per table (TableQueue, id TableQueueID), held by
// Temporal, so it orders promotions on every worker and host and survives
// any of them. A promotion enqueues itself with SignalWithStart (the
// TableQueueEnqueue activity), waits for the grant signal, and signals
// release when its commit is done or it failed. A requester that is gone
// without releasing (terminated, timed out) is noticed by the queue, which
// signals the requesters it knows every queuePing and drops those whose
// signal fails because their execution is closed.
//
// Why a lock workflow rather than ordering by logical date: the runs that
// contend need not be a backfill's (a manual run, a schedule and a backfill
// may all promote into one table), and a lock needs no one to know the
// others in advance; FIFO order is fair, and a backfill's runs, started in
// date order, arrive in date order anyway.
const (
	TableQueueWorkflow        = "TableQueue"
	TableQueueEnqueueActivity = "TableQueueEnqueue"

	queueAcquireSignal = "acquire"
	queueReleaseSignal = "release"
	// Sent to a requester: its grant, or whom it waits for.
	queueNoticeSignal = "table-queue"
)

const (
	queuePing = 30 * time.Second // how often the queue checks its requesters are alive
	queueIdle = time.Minute      // how long an empty queue lingers before it ends
	// queueMaxWait bounds how long a promotion waits for its turn before
	// it goes ahead anyway (see waitTurn).
	queueMaxWait = 30 * time.Minute
	// queueMaxEvents: continue as new before the history gets long.
	queueMaxEvents = 5000
)

// TableQueueID is the workflow id of a table's queue: per task queue (its
// workers run the queue workflow, and are polling while a promotion of
// theirs waits) and per catalog (catalog, a digest of its identity), since
// two lakes, or two test servers' lakes, may both hold an ml.training.
func TableQueueID(taskQueue, catalog, tbl string) string {
	return "retrain-table-queue/" + taskQueue + "/" + catalog + "/" + tbl
}

// catalogKey identifies a catalog in queue ids: a digest of its identity
// (type, host, port, database, user, warehouse), never of its URI, which
// may hold a password a digest would let a guess list recover.
func catalogKey(c lake.Config) string {
	sum := sha256.Sum256([]byte(c.Identity().Key()))
	return hex.EncodeToString(sum[:6])
}

// QueueRequest is one promotion in a table's queue.
type QueueRequest struct {
	WorkflowID string    `json:"workflow_id"`
	RunID      string    `json:"run_id"`
	Label      string    `json:"label"` // "run R node N", for whoever waits behind it
	Start      string    `json:"start_date,omitempty"`
	End        string    `json:"end_date,omitempty"` // inclusive; Start or End "": the whole table
	Since      time.Time `json:"since"`
}

func (r QueueRequest) same(o QueueRequest) bool {
	return r.WorkflowID == o.WorkflowID && r.RunID == o.RunID
}

// overlaps reports whether two requests may touch the same partitions.
// YYYY-MM-DD dates compare as strings.
func (r QueueRequest) overlaps(o QueueRequest) bool {
	if r.Start == "" || r.End == "" || o.Start == "" || o.End == "" {
		return true
	}
	return r.Start <= o.End && o.Start <= r.End
}

func (r QueueRequest) String() string {
	if r.Start == "" {
		return r.Label
	}
	return fmt.Sprintf("%s (%s..%s)", r.Label, r.Start, r.End)
}

// QueueNotice tells a requester it holds its turn, or whom it waits for.
type QueueNotice struct {
	Granted bool           `json:"granted"`
	Ahead   []QueueRequest `json:"ahead,omitempty"`
}

// QueueState is a table queue's state: its input, and what it continues
// as new with.
type QueueState struct {
	Table   string         `json:"table"`
	Holders []QueueRequest `json:"holders,omitempty"`
	Waiting []QueueRequest `json:"waiting,omitempty"` // in arrival order
}

func (s *QueueState) enqueue(r QueueRequest) {
	for _, h := range append(append([]QueueRequest{}, s.Holders...), s.Waiting...) {
		if h.same(r) {
			return // an activity retry sent it again
		}
	}
	s.Waiting = append(s.Waiting, r)
}

func (s *QueueState) remove(r QueueRequest) {
	drop := func(l []QueueRequest) []QueueRequest {
		out := l[:0]
		for _, x := range l {
			if !x.same(r) {
				out = append(out, x)
			}
		}
		return out
	}
	s.Holders, s.Waiting = drop(s.Holders), drop(s.Waiting)
}

// blockers are the requests waiting request i must wait for: holders it
// overlaps, and, so that no one is overtaken forever, earlier waiting
// requests it overlaps.
func (s *QueueState) blockers(i int) []QueueRequest {
	r := s.Waiting[i]
	var b []QueueRequest
	for _, h := range s.Holders {
		if h.overlaps(r) {
			b = append(b, h)
		}
	}
	for _, w := range s.Waiting[:i] {
		if w.overlaps(r) {
			b = append(b, w)
		}
	}
	return b
}

// next moves every waiting request that may go now to the holders and
// returns them, and for each request still waiting (by its index in
// Waiting) whom it waits for.
func (s *QueueState) next() (granted []QueueRequest, waits [][]QueueRequest) {
	waiting := s.Waiting
	s.Waiting = nil
	for _, r := range waiting {
		s.Waiting = append(s.Waiting, r)
		i := len(s.Waiting) - 1
		if b := s.blockers(i); len(b) > 0 {
			waits = append(waits, b)
			continue
		}
		s.Waiting = s.Waiting[:i]
		s.Holders = append(s.Holders, r)
		granted = append(granted, r)
	}
	return granted, waits
}

// TableQueue is the queue workflow of one table (see above).
func TableQueue(ctx workflow.Context, st QueueState) error {
	log := workflow.GetLogger(ctx)
	acquire := workflow.GetSignalChannel(ctx, queueAcquireSignal)
	release := workflow.GetSignalChannel(ctx, queueReleaseSignal)
	told := map[string]string{} // requester -> the wait notice it last got
	notify := func(r QueueRequest, n QueueNotice) bool {
		err := workflow.SignalExternalWorkflow(ctx, r.WorkflowID, r.RunID, queueNoticeSignal, n).Get(ctx, nil)
		if err != nil {
			log.Info("table queue: requester gone; dropping it", "table", st.Table, "requester", r.String(), "error", err)
			st.remove(r)
			return false
		}
		return true
	}
	drain := func() bool {
		got := false
		var r QueueRequest
		for acquire.ReceiveAsync(&r) {
			st.enqueue(r)
			got = true
		}
		for release.ReceiveAsync(&r) {
			st.remove(r)
			delete(told, r.WorkflowID+"/"+r.RunID)
			got = true
		}
		return got
	}
	for {
		// Grant what may go; tell the others whom they wait for (once per
		// change). A failed notice drops its requester: look again.
		for changed := true; changed; {
			changed = false
			granted, waits := st.next()
			for _, r := range granted {
				delete(told, r.WorkflowID+"/"+r.RunID)
				if !notify(r, QueueNotice{Granted: true}) {
					changed = true
				}
			}
			waiting := append([]QueueRequest{}, st.Waiting...)
			for i, ahead := range waits {
				r := waiting[i]
				key, desc := r.WorkflowID+"/"+r.RunID, fmt.Sprint(ahead)
				if told[key] == desc {
					continue
				}
				if notify(r, QueueNotice{Ahead: ahead}) {
					told[key] = desc
				} else {
					changed = true
				}
			}
		}
		idle := len(st.Holders) == 0 && len(st.Waiting) == 0
		wait := queuePing
		if idle {
			wait = queueIdle
		}
		tctx, cancel := workflow.WithCancel(ctx)
		fired := false
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(acquire, func(workflow.ReceiveChannel, bool) {})
		sel.AddReceive(release, func(workflow.ReceiveChannel, bool) {})
		sel.AddFuture(workflow.NewTimer(tctx, wait), func(workflow.Future) { fired = true })
		sel.Select(ctx)
		cancel()
		if drain() {
			fired = false
		}
		if fired && idle {
			return nil
		}
		if fired {
			// Are they all still there? A closed execution fails the signal.
			for _, r := range append(append([]QueueRequest{}, st.Holders...), st.Waiting...) {
				notify(r, QueueNotice{Granted: isHolder(st, r), Ahead: nil})
			}
		}
		if workflow.GetInfo(ctx).GetCurrentHistoryLength() > queueMaxEvents {
			drain()
			return workflow.NewContinueAsNewError(ctx, TableQueue, st)
		}
	}
}

func isHolder(st QueueState, r QueueRequest) bool {
	for _, h := range st.Holders {
		if h.same(r) {
			return true
		}
	}
	return false
}

// waitingDetails is what a waiting promotion's page says.
func waitingDetails(tbl string, ahead []QueueRequest) string {
	names := make([]string, len(ahead))
	for i, a := range ahead {
		names[i] = a.String()
	}
	return fmt.Sprintf("**Waiting for table %s**: a promotion of overlapping dates goes first: %s", tbl, strings.Join(names, ", "))
}
