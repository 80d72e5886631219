// Package process runs the programs nodes start (commands, trainers,
// checkpointed scripts): in their own process group, killed as a group
// when the node is cancelled, with their output logged and its tail kept.
package process

import (
	"bytes"
	"context"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/retrain-ml/retrain/activities/progenv"
)

// OutputTail is how much of stdout and stderr a command node keeps as
// outputs; outputs live in workflow history and must stay small.
const OutputTail = 4 << 10

// KillGrace is how long a cancelled command gets between SIGTERM and SIGKILL.
const KillGrace = 5 * time.Second

// WaitOrKill waits for the command; on cancellation it sends SIGTERM to the
// process group, then SIGKILL after a grace period. Whatever is left of the
// group once the leader exits is killed too.
func WaitOrKill(ctx context.Context, cmd *exec.Cmd, log *slog.Logger) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		log.Warn("command cancelled, terminating process group", "cause", ctx.Err())
		signalGroup(cmd, false)
		select {
		case err = <-done:
		case <-time.After(KillGrace):
			signalGroup(cmd, true)
			err = <-done
		}
	}
	signalGroup(cmd, true)
	return err
}

// TailWriter keeps the last n bytes written and logs complete lines.
type TailWriter struct {
	mu     sync.Mutex
	n      int
	buf    []byte
	line   bytes.Buffer
	log    *slog.Logger
	stream string
	// mask hides secret values in logged lines and the tail (env.go).
	mask    *progenv.Masker
	maskLen int  // the longest masked form's length
	trimmed bool // buf lost its start
	onLine  func(line string)
}

// OnLine calls f with each complete line written, unmasked, before it is
// logged (a rank's progress lines, read for its step).
func (w *TailWriter) OnLine(f func(line string)) *TailWriter {
	w.onLine = f
	return w
}

// NewTailWriter returns a TailWriter keeping n bytes, logging lines of
// the named stream.
func NewTailWriter(n int, log *slog.Logger, stream string) *TailWriter {
	return &TailWriter{n: n, log: log, stream: stream}
}

func (w *TailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	written := len(p)
	w.buf = append(w.buf, p...)
	if keep := w.n + w.maskLen; len(w.buf) > 2*keep { // trim rarely, keep appends cheap
		w.buf = append(w.buf[:0], w.buf[len(w.buf)-keep:]...)
		w.trimmed = true
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.line.Write(p)
			break
		}
		w.line.Write(p[:i])
		w.emit()
		p = p[i+1:]
	}
	return written, nil
}

func (w *TailWriter) emit() {
	line := w.line.String()
	if w.onLine != nil {
		w.onLine(line)
	}
	if w.mask != nil {
		line = w.mask.String(line)
	}
	w.log.Info("output", "stream", w.stream, "line", line)
	w.line.Reset()
}

func (w *TailWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.line.Len() > 0 {
		w.emit()
	}
}

func (w *TailWriter) Tail() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mask != nil {
		return w.maskedTail() // env.go
	}
	b := w.buf
	if len(b) > w.n {
		b = b[len(b)-w.n:]
	}
	return string(b)
}

// LastLines joins the last n lines of s with " | ", for an error message.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
