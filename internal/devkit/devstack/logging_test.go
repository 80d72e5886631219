package devstack

import (
	"bytes"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/log/tag"
)

func TestServerLogger(t *testing.T) {
	var buf bytes.Buffer
	base := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var transient atomic.Bool
	opts, err := Options{DataDir: t.TempDir(), Logger: base}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if opts.LogLevel != slog.LevelWarn {
		t.Fatalf("default LogLevel = %v, want WARN", opts.LogLevel)
	}
	l := newServerLogger(base, opts.LogLevel, &transient)

	l.Info("info dropped")
	l.Warn("warn kept", tag.NewStringTag("k", "v"))
	log.With(l, tag.NewInt("shard", 1)).Error("error kept")
	transient.Store(true)
	l.Error("error demoted while starting, dropped at WARN")
	newServerLogger(base, slog.LevelDebug, &transient).Error("error demoted while starting")
	transient.Store(false)
	log.NewSlogLogger(l).Info("slog info dropped")

	out := buf.String()
	for _, want := range []string{
		`level=WARN msg="warn kept" component=temporal k=v`,
		`level=ERROR msg="error kept" component=temporal shard=1`,
		`level=DEBUG msg="error demoted while starting"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "dropped") || strings.Contains(out, "level=ERROR msg=\"error demoted") {
		t.Errorf("records below WARN were logged:\n%s", out)
	}

	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(r.(error).Error(), "cannot bind") {
				t.Errorf("Fatal: recovered %v, want a panic carrying the message", r)
			}
		}()
		l.Fatal("cannot bind", tag.NewStringTag("address", "x"))
	}()
}
