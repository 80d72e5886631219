package tracing

import (
	"context"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// A typo in the endpoint or protocol fails before anything starts, and
// names the flag.
func TestStartRefusesBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"no scheme", Options{Endpoint: "localhost:4317", Protocol: ProtocolGRPC, ServiceName: "s"}, "--otel-endpoint"},
		{"ftp", Options{Endpoint: "ftp://collector:4317", Protocol: ProtocolGRPC, ServiceName: "s"}, "--otel-endpoint"},
		{"no host", Options{Endpoint: "http://", Protocol: ProtocolGRPC, ServiceName: "s"}, "--otel-endpoint"},
		{"protocol", Options{Endpoint: "http://collector:4317", Protocol: "thrift", ServiceName: "s"}, "--otel-protocol"},
		{"service", Options{Endpoint: "http://collector:4317", Protocol: ProtocolGRPC}, "--otel-service-name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := Start(context.Background(), tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start(%+v) = %v, %v; want an error naming %s", tc.o, tr, err, tc.want)
			}
		})
	}
}

// Without an endpoint tracing is off: no provider, no interceptor, and the
// nil *Tracing's methods are safe.
func TestStartDisabled(t *testing.T) {
	tr, err := Start(context.Background(), Options{Protocol: ProtocolGRPC, ServiceName: "s"})
	if err != nil || tr != nil {
		t.Fatalf("Start without endpoint = %v, %v; want nil, nil", tr, err)
	}
	if tr.Interceptors() != nil || tr.Target() != "" || tr.Shutdown(context.Background()) != nil {
		t.Fatal("a nil Tracing is not inert")
	}
}

// Both protocols start without a collector listening (export is lazy), and
// the target masks a password in the URL.
func TestStartBothProtocols(t *testing.T) {
	for _, p := range []string{ProtocolGRPC, ProtocolHTTP} {
		tr, err := Start(context.Background(), Options{Endpoint: "https://user:hunter2@127.0.0.1:1", Protocol: p, ServiceName: "s"})
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if len(tr.Interceptors()) != 2 {
			t.Errorf("%s: %d interceptors, want the SDK's and retrain's", p, len(tr.Interceptors()))
		}
		if got := tr.Target(); strings.Contains(got, "hunter2") || !strings.HasPrefix(got, p+" https://user:") {
			t.Errorf("%s: Target() = %q; want the protocol and the URL without its password", p, got)
		}
		if err := tr.Shutdown(context.Background()); err != nil {
			t.Errorf("%s: Shutdown with no span sent: %v", p, err)
		}
	}
}

// The flags default to the standard OpenTelemetry variables.
func TestFlagsFromEnvironment(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", ProtocolHTTP)
	t.Setenv("OTEL_SERVICE_NAME", "")
	var o Options
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	o.AddFlags(fs, "retrain-worker")
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	want := Options{Endpoint: "http://collector:4318", Protocol: ProtocolHTTP, ServiceName: "retrain-worker"}
	if o != want || !o.Enabled() {
		t.Fatalf("from env: %+v; want %+v", o, want)
	}
	if err := fs.Parse([]string{"--otel-endpoint", "", "--otel-service-name", "trainer"}); err != nil {
		t.Fatal(err)
	}
	if o.Enabled() || o.ServiceName != "trainer" {
		t.Fatalf("flags over env: %+v", o)
	}
}
