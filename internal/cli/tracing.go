package cli

import (
	"context"
	"log/slog"
	"time"

	"github.com/retrain-ml/retrain/internal/tracing"
)

// StartTracing starts the OpenTelemetry exporter o asks for (none without
// an endpoint) and gives its interceptors to every client the app dials
// afterwards, and so to the workers made from them. Call the returned stop
// before the process ends: it sends the spans still buffered.
func (a *App) StartTracing(ctx context.Context, o tracing.Options, log *slog.Logger) (stop func(), err error) {
	t, err := tracing.Start(ctx, o)
	if err != nil {
		return nil, err
	}
	if t == nil {
		return func() {}, nil
	}
	a.Conn.Interceptors = append(a.Conn.Interceptors, t.Interceptors()...)
	log.Info("tracing to OTLP collector", "target", t.Target(), "service", o.ServiceName)
	return func() {
		// The command's context is often cancelled by now (Ctrl-C): the
		// flush gets a short budget of its own.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := t.Shutdown(ctx); err != nil {
			log.Warn("flush traces", "error", err)
		}
	}, nil
}
