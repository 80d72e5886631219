package tracing_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrain-ml/retrain/dags/examples"
	"github.com/retrain-ml/retrain/internal/devkit/devstack"
	"github.com/retrain-ml/retrain/internal/tracing"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/temporalconn"
	"github.com/retrain-ml/retrain/worker"
)

// TestRunSpans runs the hello pipeline on a real dev stack (Temporal on
// SQLite) with a client and a worker that trace into memory, and checks the
// trace: the client's start span is the root, the workflow's span its
// child, and every command node's step a RunActivity span under a
// StartActivity span under the workflow's, each named by pipeline, run and
// node. The run's parameter value must appear in no attribute.
func TestRunSpans(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Temporal server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	icpts, err := tracing.Interceptors(tp)
	if err != nil {
		t.Fatal(err)
	}

	srv, err := devstack.Start(ctx, devstack.Options{DataDir: t.TempDir(), SearchAttributes: runs.SearchAttributes(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	conn := temporalconn.Options{Address: srv.FrontendAddress(), Namespace: srv.Namespace(), Interceptors: icpts}
	c, err := conn.Dial(ctx, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const queue = "tracing-test"
	w, err := worker.New(ctx, c, srv.Namespace(), worker.Config{TaskQueue: queue, Pipelines: examples.FS}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}

	const secret = "s3cr3t-param-value"
	run, err := runs.Start(ctx, c, runs.Request{Pipeline: "hello", TaskQueue: queue, Params: map[string]any{"who": secret}})
	if err != nil {
		t.Fatal(err)
	}
	var res runs.Result
	if err := c.GetWorkflow(ctx, run.ID, "").Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	if res.Status != runs.StatusSucceeded {
		t.Fatalf("run %s: %s", run.ID, res.Status)
	}
	w.Stop() // every span of the run has ended once its worker is gone

	spans := exp.GetSpans()
	byID := make(map[trace.SpanID]tracetest.SpanStub, len(spans))
	for _, s := range spans {
		byID[s.SpanContext.SpanID()] = s
		for _, a := range s.Attributes {
			if strings.Contains(a.Value.Emit(), secret) {
				t.Errorf("span %s carries the param value in %s", s.Name, a.Key)
			}
		}
	}
	parent := func(s tracetest.SpanStub) (tracetest.SpanStub, bool) {
		p, ok := byID[s.Parent.SpanID()]
		return p, ok && s.Parent.TraceID() == s.SpanContext.TraceID()
	}
	named := func(name string) []tracetest.SpanStub {
		var out []tracetest.SpanStub
		for _, s := range spans {
			if s.Name == name {
				out = append(out, s)
			}
		}
		return out
	}

	starts := named("StartWorkflow:Pipeline")
	if len(starts) != 1 {
		t.Fatalf("%d StartWorkflow:Pipeline spans, want 1 (spans: %v)", len(starts), spanNames(spans))
	}
	start := starts[0]
	if start.Parent.IsValid() || start.SpanKind != trace.SpanKindClient {
		t.Errorf("StartWorkflow is not a root client span: parent %v, kind %v", start.Parent, start.SpanKind)
	}
	wantAttrs(t, start, map[string]string{tracing.AttrPipeline: "hello", tracing.AttrRunID: run.ID})

	wfs := named("RunWorkflow:Pipeline")
	if len(wfs) != 1 {
		t.Fatalf("%d RunWorkflow:Pipeline spans, want 1", len(wfs))
	}
	wf := wfs[0]
	if p, ok := parent(wf); !ok || p.SpanContext.SpanID() != start.SpanContext.SpanID() {
		t.Errorf("RunWorkflow's parent is not the client's StartWorkflow span")
	}
	wantAttrs(t, wf, map[string]string{tracing.AttrPipeline: "hello", tracing.AttrRunID: run.ID})

	var nodes []string
	for _, s := range named("RunActivity:command") {
		node := attr(s, tracing.AttrNode)
		nodes = append(nodes, node)
		wantAttrs(t, s, map[string]string{tracing.AttrPipeline: "hello", tracing.AttrRunID: run.ID, tracing.AttrNodeType: "command", tracing.AttrAttempt: "1"})
		sched, ok := parent(s)
		if !ok || sched.Name != "StartActivity:command" {
			t.Errorf("node %s: RunActivity's parent is %q, want StartActivity:command", node, sched.Name)
			continue
		}
		if p, ok := parent(sched); !ok || p.SpanContext.SpanID() != wf.SpanContext.SpanID() {
			t.Errorf("node %s: StartActivity's parent is not the workflow's span", node)
		}
	}
	slices.Sort(nodes)
	if want := []string{"count", "greet", "host", "join", "shout"}; !slices.Equal(nodes, want) {
		t.Errorf("RunActivity:command spans for nodes %v, want %v", nodes, want)
	}
}

func attr(s tracetest.SpanStub, key string) string {
	for _, a := range s.Attributes {
		if a.Key == attribute.Key(key) {
			return a.Value.Emit()
		}
	}
	return ""
}

func wantAttrs(t *testing.T, s tracetest.SpanStub, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got := attr(s, k); got != v {
			t.Errorf("%s: %s = %q, want %q", s.Name, k, got, v)
		}
	}
}

func spanNames(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}
