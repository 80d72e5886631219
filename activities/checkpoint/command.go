package checkpoint

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/retrain-ml/retrain/activities/internal/process"

	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/tabular"
	"github.com/retrain-ml/retrain/nodetype"
)

// fromCommand runs the command and checkpoints the CSV it prints. With
// declared columns the rows stream into Parquet files, and those to S3, as
// the command prints them; otherwise the output is spooled to a temporary
// file first, since types are inferred from all of it.
func (c *Checkpoints) fromCommand(ctx context.Context, cw *checkpoint.Writer, in nodetype.Input, w With,
	columns []tabular.Column, opts checkpoint.Options, log *slog.Logger) (checkpoint.Ref, error) {
	if err := process.CheckProgram(c.AllowCommands, w.Command); err != nil {
		return checkpoint.Ref{}, err
	}
	cmd, secrets, err := process.CommandEnv(ctx, in, w.Command, w.Dir, c.Env, w.Env)
	if err != nil {
		return checkpoint.Ref{}, err
	}
	stderr := process.NewTailWriter(process.OutputTail, log, "stderr").Mask(secrets)
	cmd.Stderr = stderr
	// A pipe of our own rather than StdoutPipe: Wait closes that one as
	// soon as the command exits, possibly before its output is read, and
	// Wait runs concurrently with the reading here so that a cancelled
	// node kills the command.
	stdout, pw, err := os.Pipe()
	if err != nil {
		return checkpoint.Ref{}, err
	}
	defer stdout.Close()
	cmd.Stdout = pw
	log.Info("checkpoint command starting", "argv", w.Command)
	err = cmd.Start()
	pw.Close()
	if err != nil {
		return checkpoint.Ref{}, nodetype.Permanent(errtype.BadInput, "start %q: %v", w.Command[0], err)
	}
	// The command is waited for whatever happens below; a failed read
	// kills it rather than leave it blocked on a full pipe.
	done := make(chan error, 1)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { done <- process.WaitOrKill(cctx, cmd, log) }()

	ref, readErr := readCommandCSV(cw, w.Dataset, stdout, columns, opts)
	if readErr != nil {
		cancel()
	} else {
		io.Copy(io.Discard, stdout) // a header-only table still lets the command finish
	}
	waitErr := <-done
	stderr.Flush()
	if ctx.Err() != nil {
		return checkpoint.Ref{}, ctx.Err()
	}
	// A command that failed by itself is reported as such (and retried),
	// even if what it printed was also unreadable; one killed because its
	// output was unreadable is reported by what was wrong with the output.
	switch code := cmd.ProcessState.ExitCode(); {
	case code > 0:
		return checkpoint.Ref{}, fmt.Errorf("%s exited with code %d; stderr: %s", w.Command[0], code, process.LastLines(stderr.Tail(), 5))
	case code < 0 && readErr == nil:
		return checkpoint.Ref{}, fmt.Errorf("%s: %v; stderr: %s", w.Command[0], waitErr, process.LastLines(stderr.Tail(), 5))
	}
	if readErr != nil {
		if isTabular(readErr) {
			return checkpoint.Ref{}, badData(fmt.Errorf("output of %s: %w", w.Command[0], readErr))
		}
		return checkpoint.Ref{}, readErr
	}
	return ref, nil
}

func readCommandCSV(cw *checkpoint.Writer, name string, stdout io.Reader, columns []tabular.Column, opts checkpoint.Options) (checkpoint.Ref, error) {
	if columns == nil {
		spool, err := os.CreateTemp("", "retrain-checkpoint-*.csv")
		if err != nil {
			return checkpoint.Ref{}, err
		}
		defer os.Remove(spool.Name())
		defer spool.Close()
		if _, err := io.Copy(spool, stdout); err != nil {
			return checkpoint.Ref{}, fmt.Errorf("spool command output: %w", err)
		}
		if err := spool.Sync(); err != nil {
			return checkpoint.Ref{}, err
		}
		return fromCSVFiles(cw, name, []string{spool.Name()}, nil, opts)
	}
	// The header is read ahead to order the columns, and read again by
	// the CSV reader from a copy of what reading it took from the pipe.
	var head bytes.Buffer
	header, err := tabular.CSVHeader(io.TeeReader(stdout, &head))
	if err != nil {
		return checkpoint.Ref{}, err
	}
	r, err := tabular.NewCSVReader(io.MultiReader(&head, stdout), inHeaderOrder(columns, header))
	if err != nil {
		return checkpoint.Ref{}, err
	}
	d, err := checkpoint.CreateRows(cw, name, r.Schema(), opts)
	if err != nil {
		return checkpoint.Ref{}, err
	}
	if err := copyRows(d, r); err != nil {
		return checkpoint.Ref{}, err
	}
	return d.Close()
}
