package activities

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/nodetype"
)

// outputTail is how much of stdout and stderr a command node keeps as
// outputs; outputs live in workflow history and must stay small.
const outputTail = 4 << 10

// killGrace is how long a cancelled command gets between SIGTERM and SIGKILL.
const killGrace = 5 * time.Second

// CommandType is the `command` node type: run a program.
var CommandType = dags.NodeType{
	Name: "command",
	Doc:  "Runs argv directly (no shell unless argv names one) and captures its exit code and output tails.",
	Fields: []dags.Field{
		{Name: "argv", Type: dags.FieldStringList, Required: true, Doc: "program and arguments"},
		{Name: "env", Type: dags.FieldStringMap, Doc: "extra environment; the worker's environment is inherited"},
		{Name: "dir", Type: dags.FieldString, Doc: "working directory"},
		{Name: "ok_exit_codes", Type: dags.FieldIntList, Doc: "exit codes that count as success (default [0])"},
	},
	Outputs: []string{"exit_code", "stdout", "stderr"},
	Check: func(with map[string]any) error {
		if argv, ok := with["argv"].([]any); ok && len(argv) == 0 {
			return errors.New("argv must name a program")
		}
		return nil
	},
}

// Command runs `command` nodes.
type Command struct {
	Logger *slog.Logger
}

type commandSpec struct {
	Argv        []string          `json:"argv"`
	Env         map[string]string `json:"env"`
	Dir         string            `json:"dir"`
	OKExitCodes []int             `json:"ok_exit_codes"`
}

// Run starts the program in its own process group, streams its output to the
// worker log, and kills the whole group when the activity is cancelled or
// times out, so no orphaned child keeps burning a GPU after its node ended.
func (c *Command) Run(ctx context.Context, in NodeInput) (map[string]any, error) {
	var spec commandSpec
	if err := nodetype.Decode(in.With, &spec); err != nil {
		return nil, Permanent(errtype.BadInput, "%v", err)
	}
	if len(spec.Argv) == 0 {
		return nil, Permanent(errtype.BadInput, "argv is empty")
	}
	okCodes := spec.OKExitCodes
	if len(okCodes) == 0 {
		okCodes = []int{0}
	}
	log := c.Logger.With("pipeline", in.Pipeline, "run", in.RunID, "node", in.Node)

	cmd := nodeCommand(in, spec.Argv, spec.Dir, spec.Env)
	stdout := newTailWriter(outputTail, log, "stdout")
	stderr := newTailWriter(outputTail, log, "stderr")
	cmd.Stdout, cmd.Stderr = stdout, stderr

	log.Info("command starting", "argv", spec.Argv)
	if err := cmd.Start(); err != nil {
		// A missing program will not appear on retry.
		return nil, Permanent(errtype.BadInput, "start %q: %v", spec.Argv[0], err)
	}
	waitErr := waitOrKill(ctx, cmd, log)
	stdout.flush()
	stderr.flush()

	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	code := cmd.ProcessState.ExitCode()
	outputs := map[string]any{
		"exit_code": code,
		"stdout":    strings.TrimRight(stdout.tail(), "\n"),
		"stderr":    strings.TrimRight(stderr.tail(), "\n"),
	}
	for _, ok := range okCodes {
		if code == ok {
			log.Info("command finished", "exit_code", code)
			return outputs, nil
		}
	}
	if code < 0 { // killed by a signal
		return nil, fmt.Errorf("%s: %v; stderr: %s", spec.Argv[0], waitErr, lastLines(stderr.tail(), 5))
	}
	return nil, fmt.Errorf("%s exited with code %d; stderr: %s", spec.Argv[0], code, lastLines(stderr.tail(), 5))
}

// nodeCommand builds the process a node runs: argv in dir, in its own
// process group (so waitOrKill can end all of it), with the worker's
// environment plus env and the RETRAIN_PIPELINE, RETRAIN_RUN_ID and
// RETRAIN_NODE variables naming the node.
func nodeCommand(in NodeInput, argv []string, dir string, env map[string]string) *exec.Cmd {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"RETRAIN_PIPELINE="+in.Pipeline, "RETRAIN_RUN_ID="+in.RunID, "RETRAIN_NODE="+in.Node)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	setProcessGroup(cmd)
	return cmd
}

// waitOrKill waits for the command; on cancellation it sends SIGTERM to the
// process group, then SIGKILL after a grace period. Whatever is left of the
// group once the leader exits is killed too.
func waitOrKill(ctx context.Context, cmd *exec.Cmd, log *slog.Logger) error {
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
		case <-time.After(killGrace):
			signalGroup(cmd, true)
			err = <-done
		}
	}
	signalGroup(cmd, true)
	return err
}

// tailWriter keeps the last n bytes written and logs complete lines.
type tailWriter struct {
	mu     sync.Mutex
	n      int
	buf    []byte
	line   bytes.Buffer
	log    *slog.Logger
	stream string
}

func newTailWriter(n int, log *slog.Logger, stream string) *tailWriter {
	return &tailWriter{n: n, log: log, stream: stream}
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	written := len(p)
	w.buf = append(w.buf, p...)
	if len(w.buf) > 2*w.n { // trim rarely, keep appends cheap
		w.buf = append(w.buf[:0], w.buf[len(w.buf)-w.n:]...)
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

func (w *tailWriter) emit() {
	w.log.Info("output", "stream", w.stream, "line", w.line.String())
	w.line.Reset()
}

func (w *tailWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.line.Len() > 0 {
		w.emit()
	}
}

func (w *tailWriter) tail() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	b := w.buf
	if len(b) > w.n {
		b = b[len(b)-w.n:]
	}
	return string(b)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
