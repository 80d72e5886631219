package process

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestMask: a secret is masked in logged lines and in the tail, also when
// it spans writes and when the buffer's trimming cut it in two.
func TestMask(t *testing.T) {
	const secret = "TOPSECRETVALUE"
	var logged bytes.Buffer
	w := NewTailWriter(64, slog.New(slog.NewTextHandler(&logged, nil)), "stdout").Mask([]string{secret, ""})
	w.Write([]byte("key=TOPSEC"))
	w.Write([]byte("RETVALUE end\n"))
	for i := range 40 { // trims the buffer many times, at every offset
		w.Write([]byte(strings.Repeat("x", i%7) + secret + "\n"))
		if tail := w.Tail(); strings.Contains(tail, "SECRET") || strings.Contains(tail, "VALUE") || len(tail) > 64 {
			t.Fatalf("tail %q", tail)
		}
	}
	w.Flush()
	if strings.Contains(logged.String(), "SECRET") || !strings.Contains(logged.String(), "key=*** end") {
		t.Errorf("logged %s", logged.String())
	}
}
