package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/nodetype"
)

// How workers of one queue learn each other's policy (policy.go).
//
// Each worker polls one more queue, QUEUE/retrain-policy, with one poller
// whose Temporal identity is its own identity followed by its policy's
// field hashes. Nothing is ever scheduled there: the server's record of
// the queue's pollers (DescribeTaskQueue, which the gangs read hosts from
// too) is the directory. It costs each worker one idle long poll, and one
// DescribeTaskQueue call per scan; nothing is written, nothing needs an
// object store, and a worker that stops drops out of it by itself. The
// workers' own identities, which histories record, stay as they were.
//
// A worker scans the directory soon after it starts and then every
// PeerScanInterval. It warns, once per worker and difference, of every
// other live worker whose policy differs, naming it and the fields; a run
// that one of them refuses says so too (resolve, the guard, policyNotes).

// policyQueueSuffix names a queue's policy queue.
const policyQueueSuffix = "/retrain-policy"

// policyQueue is the queue whose pollers publish queue's workers' policies.
func policyQueue(queue string) string { return queue + policyQueueSuffix }

// policyActivity is the one activity the policy queue's worker registers
// (a worker must register one); nothing schedules it, and the guard
// refuses it where anything tries.
const policyActivity = "RetrainPolicyDirectory"

// defaultPeerScan is how often a worker looks for workers of its queue.
const defaultPeerScan = 15 * time.Second

// policyWorker polls queue's policy queue under an identity that publishes
// p.
func policyWorker(c client.Client, queue, base string, p policy, interceptors []interceptor.WorkerInterceptor) sdkworker.Worker {
	w := sdkworker.New(c, policyQueue(queue), sdkworker.Options{
		Identity:                           encodeIdentity(base, p),
		MaxConcurrentActivityTaskPollers:   1,
		MaxConcurrentActivityExecutionSize: 1,
		DisableWorkflowWorker:              true,
		Interceptors:                       interceptors,
	})
	w.RegisterActivityWithOptions(func(context.Context) error {
		return refused("%s only publishes workers' policies; it runs nothing", policyQueue(queue))
	}, activity.RegisterOptions{Name: policyActivity})
	return w
}

// peer is another live worker of the queue whose policy differs.
type peer struct {
	identity string
	policy   policy
	diff     []string  // fields that differ, in policyFields order
	polled   time.Time // its last poll, by the server's clock
}

// peerWatch keeps the differing workers of one queue.
type peerWatch struct {
	queue    string
	self     string // this worker's identity
	selfHost string
	policy   policy
	// list returns the policy queue's pollers.
	list     func(context.Context) ([]*taskqueuepb.PollerInfo, error)
	interval time.Duration
	logger   *slog.Logger
	now      func() time.Time

	mu      sync.Mutex
	started time.Time // the server's first record of this worker's poll
	peers   []peer
	warned  map[string]string // identity -> differing fields warned of
	agreed  bool              // the first scan's agreement was logged
}

func newPeerWatch(c client.Client, namespace, queue, self, selfHost string, p policy, interval time.Duration, logger *slog.Logger) *peerWatch {
	if interval <= 0 {
		interval = defaultPeerScan
	}
	q := policyQueue(queue)
	return &peerWatch{
		queue: queue, self: self, selfHost: selfHost, policy: p, interval: interval, logger: logger, now: time.Now,
		warned: map[string]string{},
		list: func(ctx context.Context) ([]*taskqueuepb.PollerInfo, error) {
			resp, err := c.WorkflowService().DescribeTaskQueue(ctx, &workflowservice.DescribeTaskQueueRequest{
				Namespace:     namespace,
				TaskQueue:     &taskqueuepb.TaskQueue{Name: q, Kind: enumspb.TASK_QUEUE_KIND_NORMAL},
				TaskQueueType: enumspb.TASK_QUEUE_TYPE_ACTIVITY,
			})
			if err != nil {
				return nil, fmt.Errorf("describe task queue %s: %w", q, err)
			}
			return resp.GetPollers(), nil
		},
	}
}

// errSelfNotSeen: the server has no poll of this worker's yet.
var errSelfNotSeen = errors.New("this worker's own poll is not recorded yet")

// scan reads the directory once, warns of differing workers not warned of
// before, and keeps the differing ones for messages.
func (w *peerWatch) scan(ctx context.Context) error {
	pollers, err := w.list(ctx)
	if err != nil {
		return err
	}
	now := w.now()
	type entry struct {
		base   string
		policy policy
		polled time.Time
	}
	var others []entry
	var self time.Time
	for _, p := range pollers {
		base, pol, ok := decodeIdentity(p.GetIdentity())
		if !ok {
			continue
		}
		polled := p.GetLastAccessTime().AsTime()
		if base == w.self {
			self = polled
			continue
		}
		others = append(others, entry{base, pol, polled})
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started.IsZero() {
		if self.IsZero() {
			return errSelfNotSeen
		}
		w.started = self
	}
	var current []peer
	agree := 0
	for _, o := range others {
		if now.Sub(o.polled) > pollerFreshness {
			continue // stopped a while ago
		}
		diff := w.policy.diff(o.policy)
		if len(diff) == 0 {
			agree++
			continue
		}
		// This host's worker that last polled before this one first did
		// is the one this worker replaced (a restart with new flags):
		// a live one polls again, and is seen then.
		if h, ok := hostOfIdentity(o.base); ok && h == w.selfHost && o.polled.Before(w.started) {
			continue
		}
		pe := peer{identity: o.base, policy: o.policy, diff: diff, polled: o.polled}
		current = append(current, pe)
		if key := strings.Join(diff, ","); w.warned[o.base] != key {
			w.warned[o.base] = key
			w.logger.Warn("another worker on this task queue runs under a different policy: what a run does depends on which worker takes its tasks; "+
				"start every worker of a queue with the same policy flags, pipelines and secrets (see docs/scaling.md)",
				"queue", w.queue, "worker", o.base, "differs", w.describe(pe), "last_polled", age(now, o.polled), "this_worker", w.self)
		}
	}
	w.peers = current
	// Forget the workers no longer listed: identities carry a process id,
	// so one that comes back is another process, warned of anew.
	for id := range w.warned {
		if !slices.ContainsFunc(others, func(o entry) bool { return o.base == id }) {
			delete(w.warned, id)
		}
	}
	if !w.agreed {
		w.agreed = true
		if agree > 0 && len(current) == 0 {
			w.logger.Info("the other workers on this task queue run under this worker's policy", "queue", w.queue, "workers", agree, "policy", w.policy.digest())
		}
	}
	return nil
}

// describe names the fields pe differs in, with the values where they are
// not secret (on/off, unset/set) and what sets each.
func (w *peerWatch) describe(pe peer) string {
	parts := make([]string, 0, len(pe.diff))
	for _, f := range pe.diff {
		parts = append(parts, fmt.Sprintf("%s (%s: %s here, %s there)", f, setBy(f), tokenWords(w.policy[f]), tokenWords(pe.policy[f])))
	}
	return strings.Join(parts, "; ")
}

// tokenWords says what a token may: on, off, unset, or another value.
func tokenWords(tok string) string {
	switch tok {
	case tokenOn, tokenOff:
		return tok
	case tokenUnset:
		return "unset"
	}
	return "set (digest " + tok + ")"
}

func age(now, t time.Time) string {
	d := max(now.Sub(t), 0)
	return d.Round(time.Second).String() + " ago"
}

// run scans until ctx is done: every second until the server records
// this worker's poll, then every interval.
func (w *peerWatch) run(ctx context.Context) {
	wait := time.Second
	for {
		err := w.scan(ctx)
		switch {
		case err == nil:
			wait = w.interval
		case errors.Is(err, errSelfNotSeen) || ctx.Err() != nil:
		default:
			w.logger.Debug("cannot list the workers of this task queue", "queue", w.queue, "error", err)
			wait = w.interval
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// differing returns the live workers whose field differs from this one's.
func (w *peerWatch) differing(field string) []peer {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []peer
	for _, p := range w.peers {
		if slices.Contains(p.diff, field) {
			out = append(out, p)
		}
	}
	return out
}

// disagreement is the clause a refusal on field adds when other workers
// of the queue differ in it: "" when none is known to.
func (w *peerWatch) disagreement(field string) string {
	peers := w.differing(field)
	if len(peers) == 0 {
		return ""
	}
	now := w.now()
	names := make([]string, len(peers))
	for i, p := range peers {
		names[i] = fmt.Sprintf("%s, last polled %s", p.identity, age(now, p.polled))
	}
	who := strings.Join(names, "; ")
	if field == fieldInline && w.policy[fieldInline] == tokenOff {
		return fmt.Sprintf("it runs without --allow-inline-specs while other workers on task queue %q accept them (%s)", w.queue, who)
	}
	return fmt.Sprintf("other workers on task queue %q run with another %s (%s), this one with %s", w.queue, field, who, describeSetBy(field, w.policy[field]))
}

func describeSetBy(field, tok string) string {
	return setBy(field) + " " + tokenWords(tok)
}

// refusedFields maps what a refusal's message names to the policy field
// that decided it: the messages of process.CheckProgram, Policy.CheckPath
// and Policy.Secret.
var refusedFields = []struct{ needle, field string }{
	{"--allow-commands", fieldCommands},
	{"--allow-paths", fieldPaths},
	{"is not set: the worker has no " + progenv.SecretEnvPrefix, fieldSecrets},
}

// policyNotes annotates a node's non-retryable refusal (a program not
// allowed, a path outside --allow-paths, a secret not set) with the worker
// that refused it, when other workers of the queue differ in that field:
// the same run would have passed on one of them.
type policyNotes struct {
	interceptor.WorkerInterceptorBase
	identity string
	watch    *peerWatch
}

func (n *policyNotes) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &policyNotesActivity{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, n: n}
}

type policyNotesActivity struct {
	interceptor.ActivityInboundInterceptorBase
	n *policyNotes
}

func (a *policyNotesActivity) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	out, err := a.Next.ExecuteActivity(ctx, in)
	if err != nil {
		err = a.n.note(err)
	}
	return out, err
}

// note returns err with the refusing worker and the disagreement, or err
// itself when it is no policy refusal or nobody disagrees. The error keeps
// its type, cause and the attempt its details record (nodetype.Activity's).
func (n *policyNotes) note(err error) error {
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || !appErr.NonRetryable() || appErr.Type() != errtype.BadInput {
		return err
	}
	msg := appErr.Message()
	for _, r := range refusedFields {
		if !strings.Contains(msg, r.needle) {
			continue
		}
		clause := n.watch.disagreement(r.field)
		if clause == "" {
			return err
		}
		opts := temporal.ApplicationErrorOptions{NonRetryable: true, Cause: appErr.Unwrap(), Category: appErr.Category()}
		if appErr.HasDetails() {
			var fd nodetype.FailureDetails
			if appErr.Details(&fd) != nil {
				return err // details of another kind: left as they are
			}
			opts.Details = []any{fd}
		}
		return temporal.NewApplicationErrorWithOptions(
			fmt.Sprintf("worker %s refused: %s; %s: workers on one queue must share one policy", n.identity, msg, clause), appErr.Type(), opts)
	}
	return err
}

// PublishedPolicy is one live worker of a queue as its policy queue lists
// it (`retrain workers`).
type PublishedPolicy struct {
	Worker string    `json:"worker"`
	Digest string    `json:"digest"`
	Polled time.Time `json:"last_polled"`
	// Differs lists the fields in which this worker's policy differs from
	// the queue's most common one; empty where it is that one.
	Differs []string `json:"differs,omitempty"`
}

// QueuePolicies lists the live workers of queue with their policy digests,
// and where workers differ, each one's fields that differ from the policy
// most of them run under (the earliest listed worker's, on a tie).
func QueuePolicies(ctx context.Context, c client.Client, namespace, queue string) ([]PublishedPolicy, error) {
	w := newPeerWatch(c, namespace, queue, "", "", nil, 0, slog.Default())
	pollers, err := w.list(ctx)
	if err != nil {
		return nil, err
	}
	return publishedPolicies(pollers, time.Now()), nil
}

func publishedPolicies(pollers []*taskqueuepb.PollerInfo, now time.Time) []PublishedPolicy {
	type entry struct {
		pub PublishedPolicy
		pol policy
	}
	var es []entry
	count := map[string]int{}
	for _, p := range pollers {
		base, pol, ok := decodeIdentity(p.GetIdentity())
		polled := p.GetLastAccessTime().AsTime()
		if !ok || now.Sub(polled) > pollerFreshness {
			continue
		}
		es = append(es, entry{PublishedPolicy{Worker: base, Digest: pol.digest(), Polled: polled}, pol})
		count[pol.digest()]++
	}
	slices.SortStableFunc(es, func(a, b entry) int { return strings.Compare(a.pub.Worker, b.pub.Worker) })
	var ref policy
	best := 0
	for _, e := range es {
		if count[e.pub.Digest] > best {
			ref, best = e.pol, count[e.pub.Digest]
		}
	}
	out := make([]PublishedPolicy, len(es))
	for i, e := range es {
		out[i] = e.pub
		out[i].Differs = ref.diff(e.pol)
	}
	return out
}
