package lake

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/nodetype"
)

// TestQueueTurns: overlapping promotions go one at a time, in arrival
// order; disjoint ones go at once; a later request that overlaps an
// earlier waiting one waits behind it even when the holders would let it
// pass (no one is overtaken forever); a released turn goes to the next.
func TestQueueTurns(t *testing.T) {
	req := func(id, from, to string) QueueRequest {
		return QueueRequest{WorkflowID: id, RunID: "r", Label: id, Start: from, End: to}
	}
	names := func(l []QueueRequest) string {
		out := ""
		for _, r := range l {
			out += r.WorkflowID
		}
		return out
	}
	s := QueueState{Table: "ml.training"}
	s.enqueue(req("a", "2026-11-01", "2026-11-04"), 0)
	s.enqueue(req("b", "2026-11-02", "2026-11-05"), 0) // overlaps a
	s.enqueue(req("c", "2026-11-05", "2026-11-08"), 0) // overlaps b only
	s.enqueue(req("d", "2026-11-09", "2026-11-12"), 0) // overlaps none
	s.enqueue(req("a", "2026-11-01", "2026-11-04"), 0) // a retried enqueue: no second entry
	granted, waits := s.next()
	if names(granted) != "ad" || names(s.Holders) != "ad" || names(s.Waiting) != "bc" {
		t.Fatalf("granted %q, holders %q, waiting %q: want a and d to go, b and c to wait", names(granted), names(granted), names(s.Waiting))
	}
	if len(waits) != 2 || names(waits[0]) != "a" || names(waits[1]) != "b" {
		t.Fatalf("b and c wait for %v: want b for a, c for b (ahead of it, though no holder blocks it)", waits)
	}
	s.remove(req("a", "", ""))
	granted, _ = s.next()
	if names(granted) != "b" || names(s.Waiting) != "c" {
		t.Fatalf("after a's release: granted %q, waiting %q; want b, then c", names(granted), names(s.Waiting))
	}
	s.remove(req("b", "", ""))
	if granted, _ = s.next(); names(granted) != "c" {
		t.Fatalf("after b's release: granted %q, want c", names(granted))
	}
	whole := QueueRequest{WorkflowID: "w", RunID: "r"}
	if !whole.overlaps(req("x", "2026-01-01", "2026-01-01")) || req("x", "2026-01-01", "2026-01-02").overlaps(req("y", "2026-01-03", "2026-01-04")) {
		t.Error("overlaps: a request without dates must overlap all; disjoint ranges must not")
	}
	if got := waitingDetails("ml.training", []QueueRequest{req("run-1", "2026-11-01", "2026-11-04")}); got != fmt.Sprintf("**Waiting for table ml.training**: a promotion of overlapping dates goes first: run-1 (2026-11-01..2026-11-04)") {
		t.Errorf("details %q", got)
	}
}

// TestQueueTurnThatNeverComes: a holder that never releases (or requests a
// client forged into the queue) delays a promotion by queueMaxWait at
// most; then it goes ahead, its commit guarded by the re-plan on conflict.
func TestQueueTurnThatNeverComes(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := s.NewTestWorkflowEnvironment()
	const queueID = "retrain-table-queue/q/abc/ml.training"
	// The queue answers: a (forged) holder goes first, and never releases.
	env.RegisterActivityWithOptions(func(context.Context, EnqueueInput) (string, error) {
		env.SignalWorkflow(queueNoticeSignal, QueueNotice{Ahead: []QueueRequest{{WorkflowID: "forged", RunID: "r", Label: "forged holder"}}})
		return queueID, nil
	}, activity.RegisterOptions{Name: TableQueueEnqueueActivity})
	wf := func(ctx workflow.Context) (time.Duration, error) {
		start := workflow.Now(ctx)
		release, note, err := waitTurn(ctx, nodetype.Input{RunID: "r", Node: "promote",
			With: map[string]any{"training_table": "ml.training", "start_date": "2026-11-01", "end_date": "2026-11-04"}})
		if err != nil {
			return 0, err
		}
		release()
		if want := "table queue: the turn did not come within 30m0s: promoting on the commit's compare-and-swap"; note != want {
			return 0, fmt.Errorf("note %q, want %q", note, want)
		}
		return workflow.Now(ctx).Sub(start), nil
	}
	env.RegisterWorkflowWithOptions(wf, workflow.RegisterOptions{Name: "waiter"})
	released := false
	env.OnSignalExternalWorkflow(mock.Anything, queueID, "", queueReleaseSignal, mock.Anything).
		Return(func(string, string, string, string, any) error { released = true; return nil })
	env.ExecuteWorkflow("waiter")
	var waited time.Duration
	if err := env.GetWorkflowResult(&waited); err != nil {
		t.Fatal(err)
	}
	if waited != queueMaxWait || !released {
		t.Fatalf("went ahead after %s (released %t), want %s and a release", waited, released, queueMaxWait)
	}
}

// TestQueueThatDoesNotAnswer: a queue that takes the request but never
// answers (flooded, stuck) delays a promotion by queueAckWait only.
func TestQueueThatDoesNotAnswer(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivityWithOptions(func(context.Context, EnqueueInput) (string, error) { return "retrain-table-queue/q/ml.training/x", nil },
		activity.RegisterOptions{Name: TableQueueEnqueueActivity})
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context) (string, error) {
		start := workflow.Now(ctx)
		release, note, err := waitTurn(ctx, nodetype.Input{RunID: "r", Node: "promote", With: map[string]any{"training_table": "ml.training"}})
		if err != nil {
			return "", err
		}
		release()
		return fmt.Sprintf("%s after %s", note, workflow.Now(ctx).Sub(start)), nil
	}, workflow.RegisterOptions{Name: "waiter"})
	env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, "", queueReleaseSignal, mock.Anything).Return(nil)
	env.ExecuteWorkflow("waiter")
	var got string
	if err := env.GetWorkflowResult(&got); err != nil {
		t.Fatal(err)
	}
	if want := "table queue did not answer within 20s: promoting on the commit's compare-and-swap after 20s"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
}

// TestQueueIDsPerCatalogAndTaskQueue: two lakes (or two test servers'
// lakes) that both hold ml.training, or two worker pools on different task
// queues, never share a queue; the id holds no password.
func TestQueueIDsPerCatalogAndTaskQueue(t *testing.T) {
	key := []byte("0123456789abcdef-key")
	a := lake.Config{Type: "sql", URI: "postgres://u:secret@db/lake", Warehouse: "s3://b/w"}.Identity().Key()
	b := lake.Config{Type: "sql", URI: "file:/tmp/x/catalog.db", Warehouse: "file:///tmp/x/warehouse"}.Identity().Key()
	ids := map[string]bool{
		tableQueueID(key, "retrain", a, "ml.training"): true, tableQueueID(key, "retrain", b, "ml.training"): true,
		tableQueueID(key, "gpu", a, "ml.training"): true, tableQueueID(key, "retrain", a, "ml.other"): true,
	}
	for id := range ids {
		if strings.Contains(id, "secret") || strings.Contains(id, "db") || strings.Contains(id, "/tmp/x") {
			t.Errorf("queue id %s holds the catalog's settings", id)
		}
	}
	if len(ids) != 4 {
		t.Errorf("queue ids collide: %v", ids)
	}
}

// TestQueueIDIsKeyed: without the workers' key no one can name a queue:
// the same table, task queue and catalog give unrelated ids under two
// keys, and the id is the public names plus a 128-bit MAC.
func TestQueueIDIsKeyed(t *testing.T) {
	cat := lake.Config{Type: "sql", URI: "postgres://retrain@db:5432/lake", Warehouse: "s3://b/w"}.Identity().Key()
	a := tableQueueID([]byte("key-one-0123456789"), "prodq", cat, "ml.training")
	b := tableQueueID([]byte("key-two-0123456789"), "prodq", cat, "ml.training")
	if a == b {
		t.Fatalf("two keys give one id %s", a)
	}
	prefix := "retrain-table-queue/prodq/ml.training/"
	if !strings.HasPrefix(a, prefix) || len(strings.TrimPrefix(a, prefix)) != 32 {
		t.Fatalf("id %s: want %s and 32 hex digits", a, prefix)
	}
	if a != tableQueueID([]byte("key-one-0123456789"), "prodq", cat, "ml.training") {
		t.Fatal("the id is not stable under one key")
	}
	key := []byte("key-one-0123456789")
	if !validProof(key, a, queueProof(key, a)) || validProof(key, b, queueProof(key, a)) ||
		validProof([]byte("key-two-0123456789"), a, queueProof(key, a)) || validProof(key, a, "") {
		t.Fatal("a queue's proof must hold for its id under its key only")
	}
}

// TestQueueIDIgnoresPassword: the queue id's MAC is over the catalog's
// identity, so it is the same whatever the password (nothing in it can
// confirm a guessed one) and in whichever form the URI carries it, and
// still tells hosts, databases and users apart.
func TestQueueIDIgnoresPassword(t *testing.T) {
	id := func(uri string) string {
		return tableQueueID([]byte("0123456789abcdef-key"), "prodq", lake.Config{Type: "sql", URI: uri, Warehouse: "s3://b/w"}.Identity().Key(), "ml.training")
	}
	for _, uris := range [][]string{
		{"postgres://retrain:Pg-Weak-summer2026@db:5432/lake", "postgres://retrain:other@db:5432/lake", "postgres://retrain@db:5432/lake"},
		{"postgres://retrain@db:5432/lake?password=Pg-Weak-summer2026", "postgres://retrain@db:5432/lake?password=other"},
		{"postgres://retrain@db/lake?sslmode=require&sslpassword=one", "postgres://retrain@db/lake?sslmode=require&sslpassword=two"},
		{"host=db port=5432 dbname=lake user=retrain password=Pg-Weak-summer2026", "host=db port=5432 dbname=lake user=retrain password=other"},
	} {
		for _, u := range uris[1:] {
			if id(u) != id(uris[0]) {
				t.Errorf("queue id changed with the password alone: %s (%s) vs %s (%s)", id(uris[0]), uris[0], id(u), u)
			}
		}
	}
	for _, pair := range [][2]string{
		{"postgres://retrain:pw@db1/lake", "postgres://retrain:pw@db2/lake"},
		{"postgres://retrain:pw@db/lake1", "postgres://retrain:pw@db/lake2"},
		{"postgres://alice:pw@db/lake", "postgres://bob:pw@db/lake"},
		{"host=db dbname=lake user=retrain", "host=db port=5433 dbname=lake user=retrain"},
	} {
		if id(pair[0]) == id(pair[1]) {
			t.Errorf("%s and %s share a queue id", pair[0], pair[1])
		}
	}
}
