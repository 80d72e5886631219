package worker

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/nodetype"
)

// fakeDirectory is a policy queue's pollers, as DescribeTaskQueue lists
// them.
type fakeDirectory struct {
	now     time.Time
	pollers []*taskqueuepb.PollerInfo
}

func (d *fakeDirectory) poll(identity string, p policy, ago time.Duration) {
	for _, e := range d.pollers {
		if base, _, _ := decodeIdentity(e.Identity); base == identity {
			e.LastAccessTime = timestamppb.New(d.now.Add(-ago))
			return
		}
	}
	d.pollers = append(d.pollers, &taskqueuepb.PollerInfo{Identity: encodeIdentity(identity, p), LastAccessTime: timestamppb.New(d.now.Add(-ago))})
}

func testWatch(self, host string, p policy, d *fakeDirectory) (*peerWatch, *bytes.Buffer) {
	var log bytes.Buffer
	w := &peerWatch{
		queue: "retrain", self: self, selfHost: host, policy: p, interval: time.Second,
		logger: slog.New(slog.NewTextHandler(&log, nil)), now: func() time.Time { return d.now },
		warned: map[string]string{},
		list:   func(context.Context) ([]*taskqueuepb.PollerInfo, error) { return d.pollers, nil },
	}
	return w, &log
}

func TestPeerWatchWarns(t *testing.T) {
	dev := policyOf(Config{TaskQueue: "retrain", AllowInlineSpecs: true, ReportURL: "http://127.0.0.1:8234/runs/{run}"}, []string{"retrain"}, nil)
	plain := policyOf(Config{TaskQueue: "retrain"}, []string{"retrain"}, nil)
	d := &fakeDirectory{now: time.Unix(1_800_000_000, 0)}

	// The dev worker is alone: nothing to say.
	devWatch, devLog := testWatch("100@devbox@retrain", "devbox", dev, d)
	if err := devWatch.scan(context.Background()); !errors.Is(err, errSelfNotSeen) {
		t.Fatalf("scan before its own poll: %v", err)
	}
	d.poll("100@devbox@retrain", dev, 0)
	if err := devWatch.scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	if devLog.Len() != 0 {
		t.Errorf("alone, it logged: %s", devLog)
	}

	// hostB starts without --allow-inline-specs and --report-url: it
	// warns at its first scan, naming the dev worker and both fields.
	d.now = d.now.Add(10 * time.Second)
	d.poll("200@hostB@retrain", plain, 0)
	bWatch, bLog := testWatch("200@hostB@retrain", "hostB", plain, d)
	if err := bWatch.scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := bLog.String()
	for _, want := range []string{"level=WARN", "another worker on this task queue runs under a different policy", "worker=100@devbox@retrain",
		"allow_inline_specs (--allow-inline-specs: off here, on there)", "report_url (--report-url: unset here, set (digest ", "this_worker=200@hostB@retrain", `last_polled="10s ago"`} {
		if !strings.Contains(out, want) {
			t.Errorf("newcomer's log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "127.0.0.1:8234") {
		t.Errorf("the log holds the other worker's report URL:\n%s", out)
	}
	// The dev worker sees the newcomer at its next scan, once.
	for range 2 {
		if err := devWatch.scan(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(devLog.String(), "level=WARN"); n != 1 || !strings.Contains(devLog.String(), "worker=200@hostB@retrain") ||
		!strings.Contains(devLog.String(), "allow_inline_specs (--allow-inline-specs: on here, off there)") {
		t.Errorf("dev worker's log (%d warnings):\n%s", n, devLog)
	}

	// The refusal's clause names the worker that accepts inline specs.
	clause := bWatch.disagreement(fieldInline)
	for _, want := range []string{"it runs without --allow-inline-specs while other workers on task queue \"retrain\" accept them", "100@devbox@retrain, last polled 10s ago"} {
		if !strings.Contains(clause, want) {
			t.Errorf("clause %q lacks %q", clause, want)
		}
	}
	if c := bWatch.disagreement(fieldCommands); c != "" {
		t.Errorf("no disagreement on allow_commands, clause %q", c)
	}

	// A worker that stopped polling long ago is no peer any more.
	d.now = d.now.Add(2 * pollerFreshness)
	d.poll("200@hostB@retrain", plain, 0)
	if err := bWatch.scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c := bWatch.disagreement(fieldInline); c != "" {
		t.Errorf("stopped worker still named: %q", c)
	}
}

// TestPeerWatchRestart: a worker restarted with new flags on one host
// does not warn of the process it replaced, which the server still lists;
// another host's worker under the old policy it does warn of.
func TestPeerWatchRestart(t *testing.T) {
	oldP := policyOf(Config{TaskQueue: "retrain"}, []string{"retrain"}, nil)
	newP := policyOf(Config{TaskQueue: "retrain", AllowInlineSpecs: true}, []string{"retrain"}, nil)
	d := &fakeDirectory{now: time.Unix(1_800_000_000, 0)}
	d.poll("100@hostB@retrain", oldP, 5*time.Second) // the process replaced
	d.poll("101@hostB@retrain", newP, 0)
	w, log := testWatch("101@hostB@retrain", "hostB", newP, d)
	if err := w.scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	if log.Len() != 0 {
		t.Errorf("warned of the replaced process:\n%s", log)
	}
	// A second worker on hostB, alive (it polls after this one started),
	// is warned of.
	d.now = d.now.Add(20 * time.Second)
	d.poll("100@hostB@retrain", oldP, 0)
	if err := w.scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "worker=100@hostB@retrain") {
		t.Errorf("live worker of this host not warned of:\n%s", log)
	}
}

// TestPolicyNotes: a node's refusal that depends on the policy names the
// refusing worker and the workers that differ; other errors, and
// refusals nobody disagrees with, pass unchanged.
func TestPolicyNotes(t *testing.T) {
	strict := policyOf(Config{TaskQueue: "retrain", AllowCommands: []string{"sh"}}, []string{"retrain"}, nil)
	loose := policyOf(Config{TaskQueue: "retrain"}, []string{"retrain"}, nil)
	d := &fakeDirectory{now: time.Unix(1_800_000_000, 0)}
	d.poll("1@a@retrain", strict, 0)
	w, _ := testWatch("1@a@retrain", "a", strict, d)
	notes := &policyNotes{identity: "1@a@retrain", watch: w}
	refusal := nodetype.Permanent(errtype.BadInput, "program \"cat\" is not allowed on this worker: its --allow-commands list is sh; add it there to let nodes start it")
	if err := w.scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := notes.note(refusal); got != refusal {
		t.Errorf("alone, the refusal was changed: %v", got)
	}
	d.poll("2@b@retrain", loose, 0)
	if err := w.scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := notes.note(refusal)
	var appErr *temporal.ApplicationError
	if !errors.As(got, &appErr) || !appErr.NonRetryable() || appErr.Type() != errtype.BadInput {
		t.Fatalf("noted refusal lost its type: %#v", got)
	}
	for _, want := range []string{"worker 1@a@retrain refused: program \"cat\" is not allowed", "other workers on task queue \"retrain\" run with another allow_commands (2@b@retrain"} {
		if !strings.Contains(appErr.Message(), want) {
			t.Errorf("noted refusal %q lacks %q", appErr.Message(), want)
		}
	}
	// As nodetype.Activity returns it: the attempt in its details, the
	// refusal as its cause. Both stay.
	wrapped := temporal.NewApplicationErrorWithOptions(refusal.(*temporal.ApplicationError).Message(), errtype.BadInput,
		temporal.ApplicationErrorOptions{NonRetryable: true, Cause: refusal, Details: []any{nodetype.FailureDetails{Attempt: 3}}})
	var noted *temporal.ApplicationError
	var fd nodetype.FailureDetails
	if !errors.As(notes.note(wrapped), &noted) || !strings.HasPrefix(noted.Message(), "worker 1@a@retrain refused: program") ||
		noted.Details(&fd) != nil || fd.Attempt != 3 || !errors.Is(noted, refusal) || !noted.NonRetryable() {
		t.Errorf("noted activity error: %v (attempt %d)", noted, fd.Attempt)
	}
	// Not a policy refusal: unchanged.
	other := nodetype.Permanent(errtype.BadInput, "argv is empty")
	if got := notes.note(other); got != other {
		t.Errorf("other error changed: %v", got)
	}
	// A path refusal, where the workers agree on paths: unchanged.
	path := progenv.Policy{AllowPaths: []string{"/data"}}.CheckPath("source", "/etc/passwd")
	if got := notes.note(path); got != path {
		t.Errorf("path refusal changed though paths agree: %v", got)
	}
}

// TestPublishedPolicies: `retrain workers` lists live workers by name and
// marks the ones whose policy differs from most workers'.
func TestPublishedPolicies(t *testing.T) {
	prod := policyOf(Config{TaskQueue: "retrain"}, []string{"retrain"}, nil)
	dev := policyOf(Config{TaskQueue: "retrain", AllowInlineSpecs: true}, []string{"retrain"}, nil)
	d := &fakeDirectory{now: time.Unix(1_800_000_000, 0)}
	d.poll("3@c@retrain", prod, time.Second)
	d.poll("1@a@retrain", dev, 2*time.Second)
	d.poll("2@b@retrain", prod, 0)
	d.poll("9@gone@retrain", dev, 2*pollerFreshness)
	d.pollers = append(d.pollers, &taskqueuepb.PollerInfo{Identity: "7@old@retrain", LastAccessTime: timestamppb.New(d.now)})
	got := publishedPolicies(d.pollers, d.now)
	var lines []string
	for _, p := range got {
		lines = append(lines, p.Worker+" "+strings.Join(p.Differs, ","))
	}
	if want := []string{"1@a@retrain allow_inline_specs", "2@b@retrain ", "3@c@retrain "}; !slices.Equal(lines, want) {
		t.Errorf("listed %q, want %q", lines, want)
	}
	if got[1].Digest != prod.digest() || got[0].Digest == got[1].Digest {
		t.Errorf("digests: %+v", got)
	}
}
