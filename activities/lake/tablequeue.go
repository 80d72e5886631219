package lake

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"go.temporal.io/sdk/workflow"
)

// The table queue: promotions into one training table whose date ranges
// overlap take turns, first come first served, instead of all doing their
// work and all but one losing the commit (a 10-date backfill at
// --max-parallel 10 lost half its runs that way). Promotions of disjoint
// ranges go on at once; their commits re-base on each other
// (features.CommitPromotion).
//
// The queue is a workflow per table (TableQueue, id tableQueueID), held by
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
//
// The queue only orders promotions; the commit's compare-and-swap guards
// the table. So whatever happens to the queue (a client floods it with
// signals, starts something else under its id, holds a forged turn), a
// promotion that cannot enqueue, or whose turn does not come within
// queueMaxWait, goes ahead on the compare-and-swap and says so. Its id is
// keyed (queuekey.go) so a client cannot name it from public names.
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
	// queueMaxEvents: continue as new before the history gets long, and
	// well before the server's signal limit per execution (10,000 by
	// default), which a flood of signals would otherwise reach.
	queueMaxEvents = 5000
	// queueMaxRequests bounds the requests a queue holds (holders and
	// waiting): one more is told the queue is full and goes ahead on the
	// commit's compare-and-swap. A flood of forged requests cannot grow
	// the queue's state, or its continue-as-new input, past it.
	queueMaxRequests = 64
	// queueMaxText bounds a request's label and dates, which come from
	// whoever signals.
	queueMaxText = 200
	// queueBoundedChange versions the bounds above in TableQueue.
	queueBoundedChange = "table-queue-bounded"
)

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

// bounded returns r with its texts cut to queueMaxText bytes.
func (r QueueRequest) bounded() QueueRequest {
	cut := func(s string) string {
		if len(s) <= queueMaxText {
			return s
		}
		s = s[:queueMaxText]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		return s
	}
	r.WorkflowID, r.RunID, r.Label, r.Start, r.End = cut(r.WorkflowID), cut(r.RunID), cut(r.Label), cut(r.Start), cut(r.End)
	return r
}

// QueueNotice tells a requester it holds its turn, or whom it waits for,
// or that the queue is full (it then goes ahead without a turn).
type QueueNotice struct {
	Granted bool           `json:"granted"`
	Ahead   []QueueRequest `json:"ahead,omitempty"`
	Full    bool           `json:"full,omitempty"`
}

// QueueState is a table queue's state: its input, and what it continues
// as new with.
type QueueState struct {
	Table   string         `json:"table"`
	Holders []QueueRequest `json:"holders,omitempty"`
	Waiting []QueueRequest `json:"waiting,omitempty"` // in arrival order
	// Proof shows a retrain worker started the queue (queueProof): the
	// enqueuer checks it and ignores a queue without it.
	Proof string `json:"proof,omitempty"`
}

// enqueue adds r unless it is there already; it reports false when the
// queue is full (limit > 0 requests) and r was not added.
func (s *QueueState) enqueue(r QueueRequest, limit int) bool {
	for _, h := range append(append([]QueueRequest{}, s.Holders...), s.Waiting...) {
		if h.same(r) {
			return true // an activity retry sent it again
		}
	}
	if limit > 0 && len(s.Holders)+len(s.Waiting) >= limit {
		return false
	}
	s.Waiting = append(s.Waiting, r)
	return true
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
	limit := 0
	if workflow.GetVersion(ctx, queueBoundedChange, workflow.DefaultVersion, 1) >= 1 {
		limit = queueMaxRequests
	}
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
		full := 0
		var r QueueRequest
		for acquire.ReceiveAsync(&r) {
			got = true
			if limit > 0 {
				r = r.bounded()
			}
			if st.enqueue(r, limit) {
				continue
			}
			// Full: tell the first few so they go ahead now, without
			// waiting for the reply (a flood would make each wait a
			// round trip); the rest go ahead when their wait ends.
			if full++; full <= limit {
				log.Warn("table queue: full; the request goes ahead without a turn", "table", st.Table, "requester", r.String(), "requests", limit)
				workflow.SignalExternalWorkflow(ctx, r.WorkflowID, r.RunID, queueNoticeSignal, QueueNotice{Full: true})
			}
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
