package devstack

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/log/tag"
)

// serverHandler is the slog.Handler in front of the caller's handler for
// everything the server logs.
//
// It drops records below a minimum level before they reach the caller's
// handler: the server logs chatty Info lines (shard movements, membership,
// queue readers) that would drown the output of `retrain dev`, and the
// caller's handler is usually set up for the CLI's own Info messages.
//
// While transient is set (the stack is starting or stopping) it demotes every
// record to Debug. The services come up and go down one by one and report
// each other as unavailable meanwhile ("Frontend is not healthy yet", polls
// failing on graceful_stop): expected, harmless, and alarming in `retrain
// dev` output. A real failure during Start still surfaces as Start's error.
type serverHandler struct {
	min       slog.Leveler
	transient *atomic.Bool
	next      slog.Handler
}

func (h serverHandler) level(l slog.Level) slog.Level {
	if h.transient.Load() {
		return slog.LevelDebug
	}
	return l
}

func (h serverHandler) Enabled(ctx context.Context, l slog.Level) bool {
	l = h.level(l)
	return l >= h.min.Level() && h.next.Enabled(ctx, l)
}

func (h serverHandler) Handle(ctx context.Context, r slog.Record) error {
	r.Level = h.level(r.Level)
	if r.Level < h.min.Level() {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h serverHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return serverHandler{min: h.min, transient: h.transient, next: h.next.WithAttrs(attrs)}
}

func (h serverHandler) WithGroup(name string) slog.Handler {
	return serverHandler{min: h.min, transient: h.transient, next: h.next.WithGroup(name)}
}

// serverLogger adapts the Temporal server's log.Logger interface to slog.
type serverLogger struct {
	slog *slog.Logger
}

// newServerLogger returns a log.Logger writing into base through a
// serverHandler. Records carry component=temporal so they can be told apart
// from retrain's own lines.
func newServerLogger(base *slog.Logger, min slog.Level, transient *atomic.Bool) serverLogger {
	l := slog.New(serverHandler{min: min, transient: transient, next: base.Handler()})
	return serverLogger{slog: l.With("component", "temporal")}
}

var (
	_ log.Logger      = serverLogger{}
	_ log.WithLogger  = serverLogger{}
	_ log.SLogWrapper = serverLogger{}
)

func (l serverLogger) Debug(msg string, tags ...tag.Tag) { l.log(slog.LevelDebug, msg, tags) }
func (l serverLogger) Info(msg string, tags ...tag.Tag)  { l.log(slog.LevelInfo, msg, tags) }
func (l serverLogger) Warn(msg string, tags ...tag.Tag)  { l.log(slog.LevelWarn, msg, tags) }
func (l serverLogger) Error(msg string, tags ...tag.Tag) { l.log(slog.LevelError, msg, tags) }

// DPanic is an error in production builds of the server (zap only panics in
// development mode), so it is treated the same here.
func (l serverLogger) DPanic(msg string, tags ...tag.Tag) { l.log(slog.LevelError, msg, tags) }

// Panic and Fatal keep their contract: the server calls them when it cannot go
// on (e.g. a listener failed to bind) and the code after the call assumes it
// does not return. The stock server exits the process on Fatal; an embedded
// stack must not kill its host, so both panic instead, and Start recovers
// panics raised while the server is being built and started into errors.
func (l serverLogger) Panic(msg string, tags ...tag.Tag) {
	l.log(slog.LevelError, msg, tags)
	panic(serverPanic{msg: msg, tags: tags})
}

func (l serverLogger) Fatal(msg string, tags ...tag.Tag) {
	l.log(slog.LevelError, msg, tags)
	panic(serverPanic{msg: msg, tags: tags})
}

// With returns a logger with tags prepended, so per-component loggers built
// by the server (service name, shard id) keep their context cheaply.
func (l serverLogger) With(tags ...tag.Tag) log.Logger {
	if len(tags) == 0 {
		return l
	}
	return serverLogger{slog: l.slog.With(attrsToAny(tagsToAttrs(tags))...)}
}

// SLog lets server components that want a *slog.Logger (log.NewSlogLogger)
// use ours directly, level handling included.
func (l serverLogger) SLog() *slog.Logger { return l.slog }

func (l serverLogger) log(level slog.Level, msg string, tags []tag.Tag) {
	ctx := context.Background()
	// Check before converting tags: tag.Value() renders zap fields through a
	// map encoder, which is too expensive to do for records that get dropped.
	if !l.slog.Enabled(ctx, level) {
		return
	}
	l.slog.LogAttrs(ctx, level, msg, tagsToAttrs(tags)...)
}

func tagsToAttrs(tags []tag.Tag) []slog.Attr {
	attrs := make([]slog.Attr, 0, len(tags))
	for _, t := range tags {
		attrs = append(attrs, slog.Any(t.Key(), t.Value()))
	}
	return attrs
}

func attrsToAny(attrs []slog.Attr) []any {
	out := make([]any, len(attrs))
	for i, a := range attrs {
		out[i] = a
	}
	return out
}

// serverPanic is the value panicked by serverLogger.Panic/Fatal.
type serverPanic struct {
	msg  string
	tags []tag.Tag
}

func (p serverPanic) Error() string {
	s := p.msg
	for _, t := range p.tags {
		s += fmt.Sprintf(" %s=%v", t.Key(), t.Value())
	}
	return s
}
