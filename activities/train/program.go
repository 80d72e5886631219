package train

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/retrain-ml/retrain/activities/internal/process"
	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/gang"
	"github.com/retrain-ml/retrain/internal/trainer"
	"github.com/retrain-ml/retrain/nodetype"
)

type programResult struct{ loss float64 }

// hangCheckEvery is how often the ranks' steps are checked against the
// hang timeout.
const hangCheckEvery = time.Second

// runProgram runs the trainer program, as one process or as n ranks (see
// ranks.go) on this worker or as its host's ranks of a gang g, each in
// its own process group, reading its progress lines (its first rank's):
// on the gang's first host (or alone) each is checked by the divergence
// guard, added to the curve and heartbeated, and each checkpoint it
// announces is copied to the store so that a retry anywhere can resume
// from it. Every rank's progress lines feed the hang watch: a rank whose
// step does not advance for hang_timeout stops them all. Cancellation, a
// timeout, the guard or a hang kill every process group; so does a rank
// that fails.
func (r *trainRun) runProgram(ctx context.Context, cmd *exec.Cmd, n int, g *gangHost) (programResult, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return programResult{}, err
	}
	var (
		wait  func(context.Context) error
		first int // the global rank writing the progress stream
	)
	if g == nil && n == 1 {
		wait, err = r.startOne(cmd, pw)
	} else {
		var layout gang.Layout
		host := 0
		if g != nil {
			layout, host = g.layout, g.host
			first = layout.Rank(host, 0)
		} else {
			port, perr := freePort("127.0.0.1")
			if perr != nil {
				pw.Close()
				pr.Close()
				return programResult{}, perr
			}
			layout = localLayout(r.t.Host.ID, n, port)
		}
		wait, err = r.startRanks(cmd, layout, host, pw)
	}
	pw.Close() // the children hold the write end now; EOF comes when they are gone
	if err != nil {
		pr.Close()
		return programResult{}, err
	}

	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		res      programResult
		eventErr error
		done     = make(chan struct{})
		mask     = progenv.NewMasker(r.secrets) // once, not per line
		primary  = g.primary()
	)
	// One goroutine reads the lines and notes each step's time as it
	// comes; another handles them (the guard, the curve, checkpoint
	// uploads), so an upload delays no rank's step time.
	events := make(chan trainer.Event, 1024)
	var readErr error
	go func() {
		defer close(events)
		readErr = trainer.ReadEvents(pr, func(e trainer.Event) error {
			if e.Kind == trainer.ProgressEvent {
				r.watch.Step(first, e.Progress.Step, time.Now())
			}
			events <- e
			return nil
		})
		pr.Close()
	}()
	go func() {
		defer close(done)
		for e := range events {
			if eventErr != nil {
				continue // stopping: drain the rest
			}
			if err := r.handleEvent(pctx, e, primary, mask, &res); err != nil {
				eventErr = err
				cancel() // the guard tripped: stop the program
			}
		}
		if eventErr == nil && readErr != nil {
			eventErr = readErr
		}
	}()
	hung := make(chan *HangError, 1)
	go r.watchHang(pctx, g, hung, cancel)
	waitErr := wait(pctx)
	<-done
	cancel()

	if eventErr != nil {
		if errors.As(eventErr, new(*trainer.DivergenceError)) {
			return res, divergence(eventErr)
		}
		return res, fmt.Errorf("read the trainer's output: %w", eventErr)
	}
	select {
	case h := <-hung:
		if h != nil {
			return res, h
		}
	default:
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	return res, waitErr
}

// handleEvent handles one line of the progress stream: a log line is
// logged; on the gang's first host (or alone) a progress line is checked by
// the divergence guard, added to the curve, its checkpoint stored, and
// heartbeated; on another host it is heartbeated for its pace.
func (r *trainRun) handleEvent(ctx context.Context, e trainer.Event, primary bool, mask *progenv.Masker, res *programResult) error {
	if e.Kind != trainer.ProgressEvent {
		r.log.Info("output", "stream", "stdout", "line", mask.String(e.Line))
		return nil
	}
	p := e.Progress
	if !primary {
		r.beat(ctx, p.Step, "")
		return nil
	}
	if err := r.guard.CheckEvent(e); err != nil {
		return err
	}
	if e.Has(trainer.FieldTotal) {
		r.setTotal(p.Total)
	}
	if e.Has(trainer.FieldLoss) {
		res.loss = p.Loss
		r.addPoint(p) // before the checkpoint, which saves the curve up to its step
	}
	if p.CheckpointURI != "" {
		uri, err := r.storeCheckpoint(ctx, p.CheckpointURI, p.Step)
		if err != nil {
			r.log.Warn("cannot keep the trainer's checkpoint; a retry resumes from an earlier one", "checkpoint", p.CheckpointURI, "error", err)
			uri = ""
		}
		p.CheckpointURI = uri
	}
	r.beat(ctx, p.Step, p.CheckpointURI)
	return nil
}

// HangError is a rank whose step stopped advancing for the hang timeout:
// the node stopped every rank rather than wait for the collective
// library's own watchdog (NCCL's is 10 to 30 minutes).
type HangError struct {
	Stuck   gang.Stuck
	Host    string // the rank's host, when the ranks span several
	Timeout time.Duration
}

func (e *HangError) Error() string {
	on := ""
	if e.Host != "" {
		on = " on host " + e.Host
	}
	also := ""
	if len(e.Stuck.Ranks) > 1 {
		also = fmt.Sprintf(" (ranks %v had all stopped)", e.Stuck.Ranks)
	}
	return fmt.Sprintf("rank %d%s has not advanced past step %d for %s (hang_timeout %s)%s, so every rank was stopped "+
		"(in a synchronous gang the ranks waiting in a collective for a stuck peer stand at its step too: the one stuck may be another rank at step %[3]d)",
		e.Stuck.Rank, on, e.Stuck.Step, e.Stuck.For.Round(time.Second), e.Timeout, also)
}

// watchHang checks the ranks' steps every second until ctx ends: a rank
// stuck for the hang timeout is sent on hung, and stop stops them all.
func (r *trainRun) watchHang(ctx context.Context, g *gangHost, hung chan<- *HangError, stop func()) {
	timeout := r.hangTimeout
	if timeout <= 0 {
		return
	}
	tick := time.NewTicker(hangCheckEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			st, ok := r.watch.Stuck(now, timeout)
			if !ok {
				continue
			}
			h := &HangError{Stuck: st, Timeout: timeout}
			if g != nil {
				h.Host = g.layout.Members[g.layout.HostOf(st.Rank)].Host
			}
			r.log.Warn("a trainer rank stopped advancing; stopping every rank", "rank", st.Rank, "step", st.Step, "for", st.For, "hang_timeout", timeout)
			hung <- h
			stop()
			return
		}
	}
}

// rankLine reads a rank's stdout line for its step (ranks other than the
// one writing the progress stream).
func (r *trainRun) rankLine(rank int, line string) {
	if e := trainer.ParseLine(line); e.Kind == trainer.ProgressEvent {
		r.watch.Step(rank, e.Progress.Step, time.Now())
	}
}

// startOne starts the program as a single process writing its progress to
// stdout, and returns what waits for it: the error names its exit code
// or signal and its stderr's tail.
func (r *trainRun) startOne(cmd *exec.Cmd, stdout *os.File) (func(context.Context) error, error) {
	stderr := process.NewTailWriter(process.OutputTail, r.log, "stderr").Mask(r.secrets)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	process.SetProcessGroup(cmd)
	r.log.Info("trainer starting", "argv", r.w.Argv)
	if err := cmd.Start(); err != nil {
		return nil, nodetype.Permanent(errtype.BadInput, "start %q: %v", r.w.Argv[0], err)
	}
	return func(ctx context.Context) error {
		waitErr := process.WaitOrKill(ctx, cmd, r.log)
		r.watch.Done(0)
		stderr.Flush()
		code := cmd.ProcessState.ExitCode()
		switch {
		case code == 0:
			return nil
		case code < 0:
			return fmt.Errorf("%s: %v; stderr: %s", r.w.Argv[0], waitErr, process.LastLines(stderr.Tail(), 5))
		}
		return fmt.Errorf("%s exited with code %d; stderr: %s", r.w.Argv[0], code, process.LastLines(stderr.Tail(), 5))
	}, nil
}

// startRanks starts this host's ranks of layout, its first writing the
// progress to stdout, and returns what waits for them all: the error is
// the *RankError of the rank that failed first.
func (r *trainRun) startRanks(cmd *exec.Cmd, layout gang.Layout, host int, stdout *os.File) (func(context.Context) error, error) {
	r.log.Info("trainer starting", "argv", r.w.Argv, "ranks", layout.Processes, "hosts", len(layout.Members))
	g, err := startRanks(cmd, layout, host, stdout, r.log, r.rankLine, r.secrets...)
	if err != nil {
		return nil, nodetype.Permanent(errtype.BadInput, "start %q: %v", r.w.Argv[0], err)
	}
	g.exited = r.watch.Done
	return g.wait, nil
}
