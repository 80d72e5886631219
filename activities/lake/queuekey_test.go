package lake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/nodetype"
)

// TestQueueKeySources: the operator's key (env, then the secrets folder's
// file) wins; a short one is refused without its value in the error;
// with neither (and no store) the key is this process's own, random and
// stable.
func TestQueueKeySources(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, QueueKeyFile), []byte("from-the-secrets-folder\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k := &queueKeys{SecretsDir: dir}
	key, source, err := k.get(context.Background())
	if err != nil || string(key) != "from-the-secrets-folder" || !strings.Contains(source, QueueKeyFile) {
		t.Fatalf("secrets folder: key %q from %q, %v", key, source, err)
	}
	t.Setenv(QueueKeyEnv, "from-the-environment-0123")
	key, _, err = (&queueKeys{SecretsDir: dir}).get(context.Background())
	if err != nil || string(key) != "from-the-environment-0123" {
		t.Fatalf("env: key %q, %v", key, err)
	}
	t.Setenv(QueueKeyEnv, "short-pw")
	if _, _, err = (&queueKeys{}).get(context.Background()); err == nil || strings.Contains(err.Error(), "short-pw") {
		t.Fatalf("a short key: %v; want refused, without the key in the error", err)
	}
	os.Unsetenv(QueueKeyEnv)
	own := &queueKeys{}
	a, source, err := own.get(context.Background())
	if err != nil || len(a) < queueKeyMinSize || !strings.HasPrefix(source, "this worker process") {
		t.Fatalf("own key %q from %q, %v", a, source, err)
	}
	if b, _, _ := own.get(context.Background()); string(a) != string(b) {
		t.Fatal("a process's own key changed between promotions")
	}
	if b, _, _ := (&queueKeys{}).get(context.Background()); string(a) == string(b) {
		t.Fatal("two processes' own keys are equal: not random")
	}
}

// TestQueueRequestBounds: a full queue refuses a new request (a retried
// one it holds is still fine), and a request's texts are cut.
func TestQueueRequestBounds(t *testing.T) {
	var s QueueState
	for i := range 3 {
		if !s.enqueue(QueueRequest{WorkflowID: fmt.Sprint(i), RunID: "r"}, 3) {
			t.Fatalf("request %d refused below the limit", i)
		}
	}
	if s.enqueue(QueueRequest{WorkflowID: "late", RunID: "r"}, 3) || len(s.Waiting) != 3 {
		t.Fatalf("a full queue took one more: %d waiting", len(s.Waiting))
	}
	if !s.enqueue(QueueRequest{WorkflowID: "1", RunID: "r"}, 3) {
		t.Fatal("a retried request of a full queue's was refused")
	}
	r := QueueRequest{Label: strings.Repeat("é", queueMaxText)}.bounded()
	if len(r.Label) > queueMaxText || !strings.HasPrefix(strings.Repeat("é", queueMaxText), r.Label) {
		t.Fatalf("label cut to %d bytes: %q", len(r.Label), r.Label)
	}
}

// TestWaitTurnGoesAheadWhenEnqueueFails: any enqueue error (here the
// server's signal limit on a workflow a client started under the queue's
// id) lets the promotion go ahead at once on the commit's
// compare-and-swap, and the note says so.
func TestWaitTurnGoesAheadWhenEnqueueFails(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivityWithOptions(func(context.Context, EnqueueInput) (string, error) {
		return "", temporal.NewNonRetryableApplicationError("enqueue promotion into ml.training: exceeded workflow execution limit for signal events",
			errtype.TableQueueUnavailable, nil)
	}, activity.RegisterOptions{Name: TableQueueEnqueueActivity})
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context) (string, error) {
		release, note, err := waitTurn(ctx, nodetype.Input{RunID: "r", Node: "promote", With: map[string]any{"training_table": "ml.training"}})
		if err != nil {
			return "", err
		}
		release()
		return note, nil
	}, workflow.RegisterOptions{Name: "waiter"})
	env.ExecuteWorkflow("waiter")
	var note string
	if err := env.GetWorkflowResult(&note); err != nil {
		t.Fatal(err)
	}
	want := "table queue unavailable (enqueue promotion into ml.training: exceeded workflow execution limit for signal events): promoting on the commit's compare-and-swap"
	if note != want {
		t.Fatalf("note %q, want %q", note, want)
	}
}

// TestQueueSurvivesFlood: a flood of forged requests (most naming no
// workflow, some naming live ones that never release) neither wedges the
// queue nor grows it past queueMaxRequests: a real requester that arrives
// behind the flood is told at once either its grant or that the queue is
// full (it then goes ahead on the compare-and-swap).
func TestQueueSurvivesFlood(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(TableQueue, workflow.RegisterOptions{Name: TableQueueWorkflow})
	// The test environment runs each external signal's mock on a
	// goroutine of its own: the notices need a lock.
	var mu sync.Mutex
	notices := map[string][]QueueNotice{}
	env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, queueNoticeSignal, mock.Anything).Return(
		func(_, id, _, _ string, arg any) error {
			if strings.HasPrefix(id, "ghost-") {
				return errors.New("workflow not found")
			}
			mu.Lock()
			defer mu.Unlock()
			notices[id] = append(notices[id], arg.(QueueNotice))
			return nil
		})
	const ghosts, squatters = 1000, 3 * queueMaxRequests
	// Each callback sends a batch: the test environment's callback queue
	// is bounded, and a callback runs on the loop that drains it.
	var flood []QueueRequest
	for i := range ghosts {
		flood = append(flood, QueueRequest{WorkflowID: fmt.Sprint("ghost-", i), RunID: "r", Label: strings.Repeat("x", 5000)})
	}
	for i := range squatters {
		flood = append(flood, QueueRequest{WorkflowID: fmt.Sprint("squatter-", i), RunID: "r"})
	}
	flood = append(flood, QueueRequest{WorkflowID: "real", RunID: "r"})
	for b := 0; b < len(flood); b += 50 {
		batch := flood[b:min(b+50, len(flood))]
		env.RegisterDelayedCallback(func() {
			for _, r := range batch {
				env.SignalWorkflow(queueAcquireSignal, r)
			}
		}, time.Duration(b+1)*time.Millisecond)
	}
	// The squatters never release: end the test's queue after a while.
	env.SetWorkflowRunTimeout(2 * time.Hour)
	env.ExecuteWorkflow(TableQueueWorkflow, QueueState{Table: "ml.training"})
	if !env.IsWorkflowCompleted() {
		t.Fatal("the queue did not end")
	}
	t.Logf("queue ended: %v", env.GetWorkflowError())
	mu.Lock()
	defer mu.Unlock()
	got := notices["real"]
	if len(got) == 0 || !got[0].Full {
		t.Fatalf("the real requester behind a full queue got %+v; want told at once that the queue is full", got)
	}
	held := 0
	for id, n := range notices {
		if strings.HasPrefix(id, "squatter-") && len(n) > 0 && !n[0].Full {
			held++
		}
	}
	if held > queueMaxRequests {
		t.Fatalf("%d squatters were queued; the queue holds %d at most", held, queueMaxRequests)
	}
}

// TestQueueKeyFromStore: without an operator's key, workers sharing an
// object store agree on one random key, made by whichever comes first.
func TestQueueKeyFromStore(t *testing.T) {
	t.Setenv(QueueKeyEnv, "")
	os.Unsetenv(QueueKeyEnv)
	srv := s3test.Start(t)
	st := srv.Open(t, "registry")
	keys := make([]string, 4)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, source, err := (&queueKeys{Store: st}).get(context.Background())
			if err != nil || !strings.Contains(source, queueKeyObject) {
				t.Errorf("worker %d: key from %q, %v", i, source, err)
			}
			keys[i] = string(k)
		}()
	}
	wg.Wait()
	for i, k := range keys {
		if k != keys[0] || len(k) < queueKeyMinSize {
			t.Fatalf("worker %d's key differs or is short (%d bytes)", i, len(k))
		}
	}
	stored, _, err := st.GetBytes(context.Background(), queueKeyObject)
	if err != nil || string(stored) != keys[0] {
		t.Fatalf("the store holds %d bytes (%v), not the workers' key", len(stored), err)
	}
}
