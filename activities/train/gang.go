package train

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/gang"
	"github.com/retrain-ml/retrain/nodetype"
)

// A train node with hosts: N > 1 runs as the Gang workflow: one group of
// ranks on each of N workers of the node's queue with distinct host ids.
//
//   - Form: the workflow lists the queue's live hosts (the pollers the
//     server knows, by the host id in their identity), sends a lease to
//     each chosen host's own queue (nodetype.HostQueue), and waits until N
//     hosts hold their GPUs: that is the barrier. A host whose worker is
//     gone never picks its lease up, and another is tried. After
//     gang_timeout every lease taken is released and the attempt fails,
//     saying how many joined: no rank ever started, and no GPU stays held.
//     The node's timeout bounds the whole attempt, forming included: it
//     caps gang_timeout, no host holds its lease past it, and the ranks
//     get what is left of it (gang.Budget). A host refuses a gang past
//     its operator's limits (processes per host, hosts) before it leases,
//     and the attempt fails at once.
//   - Run: each host's ranks start from its own queue with host 0's
//     address and port; the first host to fail cancels the others, whose
//     ranks stop at once (a rank whose peer is gone also fails by itself
//     in its next collective). A host whose worker died stops
//     heartbeating and is noticed within the node's heartbeat timeout.
//   - Restart: a retryable failure forms a new gang, possibly on other
//     hosts, under the node's retry policy; it resumes from the last
//     checkpoint rank 0 stored (RETRAIN_RESUME_FROM on every host).
//
// Only ids, addresses and URIs pass through the workflow.

// Names of the gang workflow and its activities; they are recorded in
// run histories and do not change.
const (
	GangWorkflow        = "TrainGang"
	GangHostsActivity   = "TrainGangHosts"
	GangLeaseActivity   = "TrainGangLease"
	GangReleaseActivity = "TrainGangRelease"
	GangRunActivity     = "TrainGangRun"
	GangShardsActivity  = "TrainGangShards"
)

// Gang timings. A lease that no worker picks up in leasePickup is on a
// host whose worker is gone (the server lists pollers for a minute after
// they stop); listEvery paces the search for hosts while the gang is
// short; holdMargin is how long a host holds its lease past the gang's
// deadline for the run to take it.
const (
	leasePickup = 30 * time.Second
	listEvery   = 2 * time.Second
	// listEvery doubles up to listMax while lists find no host to try, and
	// a host whose lease failed is not tried again for hostBackoff: a gang
	// that waits ten minutes for a worker records a few dozen activities,
	// not hundreds.
	listMax     = 30 * time.Second
	hostBackoff = 30 * time.Second
	holdMargin  = 2 * time.Minute
	// runPickup bounds how long a host's run waits to be picked up: its
	// worker leased a moment ago, so longer means it is gone.
	runPickup = time.Minute
)

// gangBoundChange marks the gangs whose attempt the node's timeout bounds,
// forming included (gang.Budget); runs recorded before it replay without.
const gangBoundChange = "gang-node-timeout"

// Gang runs a train node across hosts.
func Gang(ctx workflow.Context, in nodetype.Input) (nodetype.Result, error) {
	if err := checkTrain(in.With); err != nil {
		return nodetype.Result{}, temporal.NewNonRetryableApplicationError(err.Error(), errtype.BadInput, nil)
	}
	w, err := nodetype.DecodeWith[With](in.With)
	if err != nil {
		return nodetype.Result{}, temporal.NewNonRetryableApplicationError(err.Error(), errtype.BadInput, nil)
	}
	g := gangRun{in: in, w: w, opts: gangOptions(in.Options)}
	if g.opts.Queue == "" {
		g.opts.Queue = workflow.GetInfo(ctx).TaskQueueName
	}
	g.joinTimeout, _ = dags.ParseDuration(w.GangTimeout) // checked by checkTrain
	g.bounded = workflow.GetVersion(ctx, gangBoundChange, workflow.DefaultVersion, 1) >= 1
	if w.ShardData {
		// Before any host leases its GPUs: a split too small for the
		// ranks fails here, naming its rows and files. (Only nodes with
		// shard_data, which no recorded history has, take this step.)
		sctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			TaskQueue:           g.opts.Queue,
			StartToCloseTimeout: time.Minute,
			RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3, NonRetryableErrorTypes: []string{errtype.BadInput}},
			Summary:             "check the shards",
		})
		in := ShardsInput{Data: w.Data, World: w.Hosts * processCount(w)}
		if err := workflow.ExecuteActivity(sctx, GangShardsActivity, in).Get(ctx, nil); err != nil {
			return nodetype.Result{}, gangFailure(err, 1)
		}
	}
	policy := nodetype.RetryPolicy(g.opts.Retry)
	var history []GangAttempt
	for attempt := 1; ; attempt++ {
		started := workflow.Now(ctx)
		key := fmt.Sprintf("%s/%s/%d", workflow.GetInfo(ctx).WorkflowExecution.RunID, in.Node, attempt)
		b := gang.Budget{Start: started, Join: g.joinTimeout}
		if g.bounded {
			b.Timeout = g.opts.Timeout
		}
		members, err := g.form(ctx, key, b)
		rec := GangAttempt{Attempt: attempt, Hosts: gang.Hosts(members), StartedAt: started}
		var results []HostResult
		if err == nil {
			formed := workflow.Now(ctx)
			rec.FormedAt = &formed
			results, err = g.run(ctx, key, members, b)
		}
		rec.EndedAt = workflow.Now(ctx)
		if err != nil {
			rec.Error = nodetype.MessageOf(unwrapStep(err))
		}
		history = append(history, rec)
		if err == nil {
			outputs, err := nodetype.Outputs(gangOutputs(results, members, w, history))
			if err != nil {
				return nodetype.Result{}, temporal.NewNonRetryableApplicationError(err.Error(), errtype.BadOutput, nil)
			}
			return nodetype.Result{Outputs: outputs, Attempt: int32(attempt), StartedAt: started, EndedAt: rec.EndedAt}, nil
		}
		if ctx.Err() != nil {
			// The node was cancelled: every host's ranks were stopped, and
			// the run ends cancelled, not failed.
			return nodetype.Result{}, temporal.NewCanceledError(history)
		}
		delay, again := gangRetryDelay(policy, attempt, err)
		if !again {
			return nodetype.Result{}, gangFailure(err, attempt)
		}
		workflow.GetLogger(ctx).Warn("training gang failed; forming a new one", "node", in.Node, "attempt", attempt, "hosts", rec.Hosts, "delay", delay, "error", rec.Error)
		if serr := workflow.Sleep(ctx, delay); serr != nil {
			return nodetype.Result{}, gangFailure(err, attempt)
		}
	}
}

// gangRun is one train node's gang workflow.
type gangRun struct {
	in          nodetype.Input
	w           With
	opts        nodetype.Options
	joinTimeout time.Duration
	// bounded: the node's timeout bounds each attempt (gangBoundChange).
	bounded bool
}

func gangOptions(o *nodetype.Options) nodetype.Options {
	if o == nil {
		return nodetype.Options{Timeout: dags.DefaultTimeout, Heartbeat: dags.DefaultHeartbeat, Retry: dags.DefaultRetry()}
	}
	opts := *o
	if opts.Heartbeat <= 0 {
		// A gang without heartbeats would notice a dead host only at the
		// node's timeout, its other hosts' GPUs held all the while.
		opts.Heartbeat = dags.DefaultHeartbeat
	}
	return opts
}

// form gathers the gang: hosts leases until w.Hosts distinct hosts hold
// their GPUs, or b's join deadline passes (then it releases them all).
func (g *gangRun) form(ctx workflow.Context, key string, b gang.Budget) ([]gang.Member, error) {
	want := g.w.Hosts
	deadline := b.JoinDeadline()
	listCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           g.opts.Queue,
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
		Summary:             "find hosts",
	})
	var (
		joined  []gang.Member
		seen    []string
		pending = map[string]workflow.Future{}
		retryAt = map[string]time.Time{} // hosts whose lease failed, and when to try them again
		failed  = map[string]string{}    // the last failure of each host that did not join
		idle    int                      // lists in a row that found no host to try
		refused error                    // a host's refusal of the gang past its limits
	)
	for len(joined) < want {
		left := deadline.Sub(workflow.Now(ctx))
		if left <= 0 {
			break
		}
		if len(joined)+len(pending) < want {
			var hosts []string
			if err := workflow.ExecuteActivity(listCtx, GangHostsActivity, g.opts.Queue).Get(ctx, &hosts); err != nil {
				g.release(ctx, key, joined, pending)
				return nil, err
			}
			seen = hosts
			idle++
			for _, h := range hosts {
				if len(joined)+len(pending) >= want {
					break
				}
				if _, ok := pending[h]; ok || slices.ContainsFunc(joined, func(m gang.Member) bool { return m.Host == h }) {
					continue
				}
				if workflow.Now(ctx).Before(retryAt[h]) {
					continue
				}
				idle = 0
				lctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
					TaskQueue:              nodetype.HostQueue(g.opts.Queue, h),
					ScheduleToStartTimeout: min(left, leasePickup),
					ScheduleToCloseTimeout: left,
					HeartbeatTimeout:       g.opts.Heartbeat,
					RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 1},
					Summary:                "join " + h,
				})
				lease := LeaseInput{Key: key, GPUs: g.w.GPUs, Hold: left + holdMargin}
				if g.bounded {
					lease.Hold = b.Hold(workflow.Now(ctx), holdMargin)
					lease.Processes, lease.Hosts = processCount(g.w), want
				}
				pending[h] = workflow.ExecuteActivity(lctx, GangLeaseActivity, lease)
			}
		}
		// Wait for a lease to end, or for a moment before looking for
		// more hosts (only while short of candidates), or the deadline.
		sel := workflow.NewSelector(ctx)
		for _, h := range slices.Sorted(maps.Keys(pending)) {
			sel.AddFuture(pending[h], func(f workflow.Future) {
				delete(pending, h)
				var m gang.Member
				if err := f.Get(ctx, &m); err != nil {
					if appErr, ok := errors.AsType[*temporal.ApplicationError](err); ok && appErr.Type() == errtype.OverLimit {
						refused = err // every host of the queue would be asked in vain
					}
					failed[h] = nodetype.MessageOf(unwrapStep(err))
					retryAt[h] = workflow.Now(ctx).Add(hostBackoff)
					workflow.GetLogger(ctx).Info("a host did not join the gang", "host", h, "error", err)
					return
				}
				joined = append(joined, m)
			})
		}
		tctx, cancelTimer := workflow.WithCancel(ctx)
		wait := left
		if len(joined)+len(pending) < want {
			wait = min(left, listEvery<<min(idle, 4), listMax)
		}
		sel.AddFuture(workflow.NewTimer(tctx, wait), func(workflow.Future) {})
		sel.Select(ctx)
		cancelTimer()
		if err := ctx.Err(); err != nil {
			g.release(ctx, key, joined, pending)
			return nil, err
		}
		if refused != nil {
			g.release(ctx, key, joined, pending)
			return nil, temporal.NewNonRetryableApplicationError(nodetype.MessageOf(unwrapStep(refused)), errtype.OverLimit, nil)
		}
	}
	if len(joined) < want {
		// The leases still out end by the deadline (their schedule-to-
		// close): those that joined after all are released with the rest.
		g.release(ctx, key, joined, pending)
		je := &gang.JoinError{
			Joined: len(joined), Want: want, Hosts: gang.Hosts(joined), Seen: seen, Failed: failed,
			Queue: g.opts.Queue, Timeout: g.w.GangTimeout,
		}
		if b.Capped() {
			je.NodeTimeout = gang.FormatDuration(b.Timeout)
		}
		return nil, temporal.NewApplicationError(je.Error(), errtype.GangIncomplete)
	}
	if err := gang.Check(joined); err != nil {
		g.release(ctx, key, joined, nil)
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), errtype.BadInput, nil)
	}
	// Ranks in host-id order, whichever host joined first: rank 0's host
	// is the one a reader expects.
	slices.SortFunc(joined, func(a, b gang.Member) int { return strings.Compare(a.Host, b.Host) })
	return joined, nil
}

// release gives back what the gang's hosts hold: those that joined, and
// those whose lease is still out once it ends. It waits for the releases
// (on a context that survives the node's cancellation).
func (g *gangRun) release(ctx workflow.Context, key string, joined []gang.Member, pending map[string]workflow.Future) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	hosts := gang.Hosts(joined)
	for _, h := range slices.Sorted(maps.Keys(pending)) {
		var m gang.Member
		if pending[h].Get(dctx, &m) == nil {
			hosts = append(hosts, m.Host)
		}
	}
	var fs []workflow.Future
	for _, h := range hosts {
		rctx := workflow.WithActivityOptions(dctx, workflow.ActivityOptions{
			TaskQueue:              nodetype.HostQueue(g.opts.Queue, h),
			ScheduleToCloseTimeout: time.Minute,
			RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 3},
			Summary:                "release " + h,
		})
		fs = append(fs, workflow.ExecuteActivity(rctx, GangReleaseActivity, key))
	}
	for _, f := range fs {
		_ = f.Get(dctx, nil) // a host that is gone released with its worker
	}
}

// run runs every host's ranks; the first host to fail cancels the others.
// The error is the failure that caused the others: a host that stopped
// heartbeating (its worker died) or failed on its own before the ones
// that failed because their peers went away.
func (g *gangRun) run(ctx workflow.Context, key string, members []gang.Member, b gang.Budget) ([]HostResult, error) {
	rctx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	procs := processCount(g.w)
	runTimeout, pickup := g.opts.Timeout, runPickup
	if left, ok := b.Left(workflow.Now(ctx)); ok {
		if left <= 0 {
			// Formed just as the node's timeout passed: nothing started,
			// and the hosts' holds end with it.
			g.release(ctx, key, members, nil)
			return nil, temporal.NewApplicationError(fmt.Sprintf("the gang formed as the node's timeout %s passed: no rank started, and every lease was released", gang.FormatDuration(b.Timeout)), errtype.GangIncomplete)
		}
		runTimeout, pickup = left, min(runPickup, left)
	}
	futures := make([]workflow.Future, len(members))
	for i, m := range members {
		actx := workflow.WithActivityOptions(rctx, workflow.ActivityOptions{
			TaskQueue:              nodetype.HostQueue(g.opts.Queue, m.Host),
			ScheduleToStartTimeout: pickup,
			StartToCloseTimeout:    runTimeout,
			HeartbeatTimeout:       g.opts.Heartbeat,
			RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 1},
			WaitForCancellation:    true,
			Summary:                fmt.Sprintf("host %d: %s", i, m.Host),
		})
		futures[i] = workflow.ExecuteActivity(actx, GangRunActivity, RunInput{Node: g.in, Key: key, Host: i, Members: members, Processes: procs})
	}
	results := make([]HostResult, len(members))
	var failures []hostFailure // in the order the hosts ended
	sel := workflow.NewSelector(ctx)
	for i, f := range futures {
		sel.AddFuture(f, func(f workflow.Future) {
			if err := f.Get(ctx, &results[i]); err != nil {
				failures = append(failures, hostFailure{host: i, err: err})
				cancel()
			}
		})
	}
	for range futures {
		sel.Select(ctx)
	}
	if err := rootCause(failures, len(members)); err != nil {
		return nil, err
	}
	return results, nil
}

// hostFailure is a host of the gang whose ranks failed.
type hostFailure struct {
	host int
	err  error
}

// rootCause picks, of the hosts' failures in the order they came, the
// one that stopped the gang: a host that timed out (its worker is gone)
// first, then the first that failed on its own, before those that were
// cancelled. The ranks of the others usually fail too once a peer is
// gone, but later. Nil when no host failed.
func rootCause(failures []hostFailure, hosts int) error {
	class := func(err error) int {
		var te *temporal.TimeoutError
		var ce *temporal.CanceledError
		switch {
		case errors.As(err, &te):
			return 0
		case errors.As(err, &ce):
			return 2
		}
		return 1
	}
	best := -1
	for i, f := range failures {
		if best < 0 || class(f.err) < class(failures[best].err) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	f := failures[best]
	var te *temporal.TimeoutError
	if errors.As(f.err, &te) {
		what := "stopped heartbeating: its worker is gone"
		switch te.TimeoutType() {
		case enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START:
			what = "never started its ranks: its worker is gone"
		case enumspb.TIMEOUT_TYPE_START_TO_CLOSE:
			what = "ran past the node's timeout"
		}
		return temporal.NewApplicationError(fmt.Sprintf("host %d of %d %s (%v); every rank on the other hosts was stopped", f.host, hosts, what, te.TimeoutType()), errtype.GangLost)
	}
	return f.err
}

// unwrapStep is err without Temporal's activity wrapper.
func unwrapStep(err error) error {
	var actErr *temporal.ActivityError
	if errors.As(err, &actErr) && actErr.Unwrap() != nil {
		return actErr.Unwrap()
	}
	return err
}

// gangRetryDelay says whether a failed gang is formed again under the
// node's policy, and after how long: not for a non-retryable failure (a
// divergence, a bad input) or a type the policy excludes, nor once the
// attempts are spent.
func gangRetryDelay(p *temporal.RetryPolicy, attempt int, err error) (time.Duration, bool) {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && (appErr.NonRetryable() || slices.Contains(p.NonRetryableErrorTypes, appErr.Type())) {
		return 0, false
	}
	var ce *temporal.CanceledError
	if errors.As(err, &ce) {
		return 0, false
	}
	if p.MaximumAttempts > 0 && int32(attempt) >= p.MaximumAttempts {
		return 0, false
	}
	d := p.InitialInterval
	for range attempt - 1 {
		d = time.Duration(float64(d) * p.BackoffCoefficient)
		if p.MaximumInterval > 0 && d > p.MaximumInterval {
			return p.MaximumInterval, true
		}
	}
	return d, true
}

// gangFailure is the node's failure: the last attempt's, with the number
// of attempts for the run's node table, and never retried by the
// Pipeline (this workflow did the retries).
func gangFailure(err error, attempt int) error {
	err = unwrapStep(err)
	typ := errtype.NodeFailed
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() != "" {
		typ = appErr.Type()
	}
	msg := nodetype.MessageOf(err)
	if attempt > 1 {
		msg = fmt.Sprintf("%s (gang attempt %d)", msg, attempt)
	}
	return temporal.NewApplicationErrorWithOptions(msg, typ, temporal.ApplicationErrorOptions{
		NonRetryable: true,
		Details:      []any{nodetype.FailureDetails{Attempt: int32(attempt)}},
	})
}

// gangOutputs are host 0's outputs with the gang's: its hosts in rank
// order with their pace, the slowest, the restarts and every attempt.
func gangOutputs(results []HostResult, members []gang.Member, w With, history []GangAttempt) Outputs {
	var out Outputs
	if results[0].Outputs != nil {
		out = *results[0].Outputs
	}
	procs := processCount(w)
	paces := map[string]float64{}
	judged := true // every host trained long enough to judge its pace
	layout := gang.Layout{Members: members, Processes: procs}
	for i, m := range members {
		h := HostOutput{Host: m.Host, Address: m.Address, GPUs: m.GPUs, StepsPerSec: gang.HostPace(results[i].Ranks), Data: results[i].Data}
		for local := range procs {
			h.Ranks = append(h.Ranks, layout.Rank(i, local))
		}
		for _, r := range results[i].Ranks {
			h.Steps = max(h.Steps, r.Step)
			judged = judged && r.Seconds >= gang.MinPaceWindow
		}
		paces[m.Host] = h.StepsPerSec
		out.Hosts = append(out.Hosts, h)
	}
	slow, ratio, ok := gang.Slowest(paces)
	ok = ok && judged
	if ok {
		out.SlowestHost = slow
	}
	out.Restarts = len(history) - 1
	out.Attempts = history
	// The node's one line (the run table, the report, the UI) says each
	// host's pace, and the straggler.
	var each []string
	for _, h := range out.Hosts {
		line := fmt.Sprintf("%s %.1f steps/s", h.Host, h.StepsPerSec)
		if d := h.Data; d != nil {
			if d.SplitBytes > 0 && d.BytesRead < d.SplitBytes {
				// With shard_data: the share of the split each host read.
				line += fmt.Sprintf(" read %.0f%% of the split", 100*float64(d.BytesRead)/float64(d.SplitBytes))
			}
			line += fmt.Sprintf(" (%s in %d shards, first step %.1fs, disk peak %s)",
				megabytes(d.BytesRead), d.Shards, d.FirstStepSeconds, megabytes(d.DiskPeak))
		}
		each = append(each, line)
	}
	out.Summary += fmt.Sprintf("; %d hosts: %s", len(out.Hosts), strings.Join(each, ", "))
	if ok {
		out.Summary += fmt.Sprintf("; slowest %s at %.2fx the median", slow, ratio)
	}
	if out.Restarts > 0 {
		out.Summary += fmt.Sprintf("; %d restarts", out.Restarts)
	}
	return out
}

// megabytes writes n bytes in MB (10^6), to a tenth.
func megabytes(n int64) string {
	return fmt.Sprintf("%.1f MB", float64(n)/1e6)
}
