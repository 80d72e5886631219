package devstack

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// Plain SDK workflows and activities used by the tests and benchmarks.

const testTaskQueue = "devstack-test"

// sequenceWorkflow runs n trivial activities one after the other: every step
// is a full round trip through history, the transfer queue and matching.
func sequenceWorkflow(ctx workflow.Context, n int) (int, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	sum := 0
	for range n {
		if err := workflow.ExecuteActivity(ctx, incrementActivity, sum).Get(ctx, &sum); err != nil {
			return 0, err
		}
	}
	return sum, nil
}

// fanOutWorkflow schedules n trivial activities at once and waits for all.
func fanOutWorkflow(ctx workflow.Context, n int) (int, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 5 * time.Minute})
	futures := make([]workflow.Future, n)
	for i := range futures {
		futures[i] = workflow.ExecuteActivity(ctx, incrementActivity, i)
	}
	sum := 0
	for _, f := range futures {
		var out int
		if err := f.Get(ctx, &out); err != nil {
			return 0, err
		}
		sum += out
	}
	return sum, nil
}

func incrementActivity(_ context.Context, x int) (int, error) { return x + 1, nil }

// quietLogger drops everything; tests that want the server's warnings pass
// testLogger instead.
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testLogger sends server logs (Warn+) to the test log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

// startStack starts a stack and stops it at cleanup.
func startStack(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	begin := time.Now()
	s, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("stack up in %v: frontend %s, UI %q", time.Since(begin).Round(time.Millisecond), s.FrontendAddress(), s.UIAddress())
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return s
}

// dial connects an SDK client to the stack and closes it at cleanup.
func dial(t testing.TB, s *Server) client.Client {
	t.Helper()
	c, err := client.Dial(client.Options{
		HostPort:  s.FrontendAddress(),
		Namespace: s.Namespace(),
		Logger:    sdklog.NewStructuredLogger(quietLogger()),
	})
	if err != nil {
		t.Fatalf("dial %s: %v", s.FrontendAddress(), err)
	}
	t.Cleanup(c.Close)
	return c
}

// startWorker runs a worker for the test workflows until cleanup (which runs
// before the stack's Stop, cleanups being LIFO).
func startWorker(t testing.TB, c client.Client, opts worker.Options) {
	t.Helper()
	w := worker.New(c, testTaskQueue, opts)
	w.RegisterWorkflow(sequenceWorkflow)
	w.RegisterWorkflow(fanOutWorkflow)
	w.RegisterActivity(incrementActivity)
	if err := w.Start(); err != nil {
		t.Fatalf("start worker: %v", err)
	}
	t.Cleanup(w.Stop)
}

// runWorkflow executes wf to completion and returns its run.
func runWorkflow(t testing.TB, c client.Client, id string, wf any, args ...any) (client.WorkflowRun, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: testTaskQueue}, wf, args...)
	if err != nil {
		t.Fatalf("start workflow %s: %v", id, err)
	}
	var out int
	if err := run.Get(ctx, &out); err != nil {
		t.Fatalf("workflow %s: %v", id, err)
	}
	return run, out
}
