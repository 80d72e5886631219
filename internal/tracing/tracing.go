// Package tracing sends OpenTelemetry traces of retrain's runs to an OTLP
// collector. It is opt-in: with no endpoint nothing is set up and the
// Temporal client gets no interceptor.
//
// The spans are the Temporal SDK's own (go.temporal.io/sdk/contrib/
// opentelemetry): StartWorkflow:Pipeline on the client that starts a run,
// RunWorkflow:Pipeline on the worker, StartActivity:TYPE where the workflow
// schedules a node and RunActivity:TYPE where the node's step runs, linked
// parent to child through the headers Temporal carries. This package adds
// retrain's names to them (see the Attr* keys): names and ids only, never a
// parameter or a node's `with`, which may hold secret values.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"

	"github.com/retrain-ml/retrain/internal/redact"
)

// OTLP protocols accepted by --otel-protocol, named as
// OTEL_EXPORTER_OTLP_PROTOCOL names them.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// Options say where traces go. The zero value disables tracing.
type Options struct {
	// Endpoint is the collector's URL, such as http://otel-collector:4317
	// (gRPC) or http://otel-collector:4318 (HTTP); "" disables tracing. An
	// https URL uses TLS.
	Endpoint string
	// Protocol is ProtocolGRPC (the default) or ProtocolHTTP.
	Protocol string
	// ServiceName is the service.name of every span's resource.
	ServiceName string
}

// AddFlags registers --otel-endpoint, --otel-protocol and
// --otel-service-name, with defaults from the standard OpenTelemetry
// environment variables (OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_SERVICE_NAME). service is the service
// name when OTEL_SERVICE_NAME is unset.
func (o *Options) AddFlags(fs *pflag.FlagSet, service string) {
	fs.StringVar(&o.Endpoint, "otel-endpoint", os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"),
		"send OpenTelemetry traces to this OTLP collector URL, e.g. http://localhost:4317; empty: no tracing (env OTEL_EXPORTER_OTLP_ENDPOINT)")
	fs.StringVar(&o.Protocol, "otel-protocol", envOr("OTEL_EXPORTER_OTLP_PROTOCOL", ProtocolGRPC),
		"OTLP protocol: grpc or http/protobuf (env OTEL_EXPORTER_OTLP_PROTOCOL)")
	fs.StringVar(&o.ServiceName, "otel-service-name", envOr("OTEL_SERVICE_NAME", service),
		"service.name of the traces (env OTEL_SERVICE_NAME)")
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// Enabled reports whether o asks for tracing.
func (o Options) Enabled() bool { return o.Endpoint != "" }

// validate checks o before anything is started, so a typo fails at once
// instead of as export errors in the log later.
func (o Options) validate() (*url.URL, error) {
	u, err := url.Parse(o.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--otel-endpoint %q: want a collector URL such as http://localhost:4317", redact.URI(o.Endpoint))
	}
	switch o.Protocol {
	case ProtocolGRPC, ProtocolHTTP:
	default:
		return nil, fmt.Errorf("--otel-protocol %q: want %s or %s", o.Protocol, ProtocolGRPC, ProtocolHTTP)
	}
	if o.ServiceName == "" {
		return nil, errors.New("--otel-service-name is empty")
	}
	return u, nil
}

// Tracing is a running trace pipeline: a tracer provider exporting to the
// collector, and the Temporal interceptors that feed it. A nil *Tracing is
// tracing switched off; its methods are safe to call.
type Tracing struct {
	provider     *sdktrace.TracerProvider
	interceptors []interceptor.ClientInterceptor
	target       string
}

// Start sets up the exporter named by o. It returns nil and no error when o
// has no endpoint. Nothing is made global: the provider reaches the spans
// only through the interceptors.
func Start(ctx context.Context, o Options) (*Tracing, error) {
	if !o.Enabled() {
		return nil, nil
	}
	u, err := o.validate()
	if err != nil {
		return nil, err
	}
	exp, err := newExporter(ctx, o.Protocol, u)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter for %s: %w", redact.URI(o.Endpoint), err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", o.ServiceName)))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	icpts, err := Interceptors(tp)
	if err != nil {
		return nil, errors.Join(err, tp.Shutdown(ctx))
	}
	return &Tracing{provider: tp, interceptors: icpts, target: o.Protocol + " " + redact.URI(u.String())}, nil
}

// newExporter makes the OTLP exporter. Neither protocol connects here:
// a collector that is down costs dropped spans and a logged error, never a
// failed run.
func newExporter(ctx context.Context, protocol string, u *url.URL) (sdktrace.SpanExporter, error) {
	if protocol == ProtocolHTTP {
		// OTEL_EXPORTER_OTLP_ENDPOINT is a base URL: the traces path is
		// appended to it, as the specification says.
		v := *u
		v.Path = strings.TrimRight(v.Path, "/") + "/v1/traces"
		return otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(v.String()))
	}
	return otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(u.String()))
}

// Interceptors returns the Temporal client interceptors that trace through
// tp: the SDK's tracing interceptor, then retrain's attributes. Put them in
// client.Options.Interceptors; workers made from that client use them too.
// Tests pass a provider with an in-memory exporter.
func Interceptors(tp trace.TracerProvider) ([]interceptor.ClientInterceptor, error) {
	ti, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{
		Tracer: tp.Tracer("github.com/retrain-ml/retrain"),
		// Queries come every second from `retrain run --wait` and the
		// report server: spans for them would bury the run's.
		DisableQueryTracing: true,
	})
	if err != nil {
		return nil, fmt.Errorf("tracing: temporal interceptor: %w", err)
	}
	// Order matters: retrain's interceptor runs inside the SDK's, where the
	// span it annotates already exists.
	return []interceptor.ClientInterceptor{ti, &attributes{}}, nil
}

// Interceptors returns the client interceptors; nil when t is nil.
func (t *Tracing) Interceptors() []interceptor.ClientInterceptor {
	if t == nil {
		return nil
	}
	return t.interceptors
}

// Target says where the spans go, for a log line: the protocol and the
// endpoint with any password in it masked.
func (t *Tracing) Target() string {
	if t == nil {
		return ""
	}
	return t.target
}

// Shutdown sends the spans still buffered and stops the exporter. Call it
// before the process exits, with a context that bounds the wait.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if err := t.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}
