package train

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/activities/internal/process"
	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/gang"
	"github.com/retrain-ml/retrain/internal/shard"
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
	// uploads), so an upload delays no rank's step time. The queue between
	// them is short: a trainer that runs far ahead of the uploads would
	// delete the local checkpoints it keeps (train.py keeps 3) before they
	// are copied, so past it the pipe fills and the trainer waits, as it
	// did when one goroutine did both.
	events := make(chan trainer.Event, 64)
	var readErr error
	go func() {
		defer close(events)
		readErr = trainer.ReadEvents(pr, func(e trainer.Event) error {
			if e.Kind == trainer.ProgressEvent {
				now := time.Now()
				r.watch.Step(first, e.Progress.Step, now)
				r.mu.Lock()
				if r.firstStep.IsZero() {
					r.firstStep = now
				}
				r.mu.Unlock()
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
			return res, temporal.NewApplicationError(h.Error(), errtype.RankHung) // retried: resumes from the checkpoint
		}
	default:
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if re := (*RankError)(nil); errors.As(waitErr, &re) {
		return res, temporal.NewApplicationError(re.Error(), errtype.RankFailed)
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
		var pos *shard.Position
		if r.shards != nil && e.Has(trainer.FieldShard) {
			if pos = r.shards.position(p.ShardEpoch, p.ShardDone); pos == nil {
				r.log.Warn("the checkpoint's shard_done names another number of ranks than the gang's; a resume with another world size starts its shares afresh",
					"step", p.Step, "ranks", len(p.ShardDone), "world", r.shards.assign.World)
			}
		}
		uri, err := r.storeCheckpoint(ctx, p.CheckpointURI, p.Step, pos)
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
	// Frame is where the rank's stack was, when the trainer prints its
	// stack on stackSignal; Waiting says it was in a collective, waiting
	// for a peer (not the stuck one itself).
	Frame   string
	Waiting bool
}

func (e *HangError) Error() string {
	on := ""
	if e.Host != "" {
		on = " on host " + e.Host
	}
	head := fmt.Sprintf("rank %d%s has not advanced past step %d for %s (hang_timeout %s)",
		e.Stuck.Rank, on, e.Stuck.Step, e.Stuck.For.Round(time.Second), e.Timeout)
	switch {
	case e.Frame != "" && !e.Waiting:
		return head + fmt.Sprintf(" and is not in a collective: its stack is at %s; the other ranks wait for it, and every rank was stopped", e.Frame)
	case e.Waiting:
		return head + fmt.Sprintf(" and waits in a collective (%s) for a peer that is stuck or gone, on another host; every rank was stopped", e.Frame)
	}
	return head + fmt.Sprintf(", so every rank was stopped (in a synchronous gang the ranks waiting in a collective for a stuck peer stand at its step too: "+
		"the one stuck may be another rank at step %d; a trainer that registers Python's faulthandler for SIGUSR1 has the stuck one named by its stack)", e.Stuck.Step)
}

// stackWait bounds how long a rank's stack dump is waited for.
const stackWait = 2 * time.Second

// hangGrace is how long a host whose stuck ranks all wait in a collective
// holds its verdict, so that the host of the rank they wait for names it
// first, by its stack.
func hangGrace(timeout time.Duration) time.Duration { return min(10*time.Second, timeout/2) }

// rankProc is a rank this worker started: its process and stderr.
type rankProc struct {
	pid    int
	stderr *process.TailWriter
}

// watchHang checks the ranks' steps every second until ctx ends: a rank
// stuck for the hang timeout is sent on hung, and stop stops them all.
// The stuck ranks are asked for their stacks first: one stuck outside a
// collective is the one the others wait for, and is named at once; when
// every stuck rank here waits in a collective (for a peer on another
// host), the verdict waits hangGrace for that peer's host to name it.
func (r *trainRun) watchHang(ctx context.Context, g *gangHost, hung chan<- *HangError, stop func()) {
	timeout := r.hangTimeout
	if timeout <= 0 {
		return
	}
	tick := time.NewTicker(hangCheckEvery)
	defer tick.Stop()
	var (
		noticed time.Time
		stacks  map[int]string
	)
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			st, ok := r.watch.Stuck(now, timeout)
			if !ok {
				noticed, stacks = time.Time{}, nil
				continue
			}
			if noticed.IsZero() {
				noticed, stacks = now, r.dumpStacks(ctx, st.Ranks)
			}
			h := &HangError{Stuck: st, Timeout: timeout}
			waiting := len(stacks) == len(st.Ranks)
			for _, rank := range st.Ranks {
				dump, ok := stacks[rank]
				if ok && !gang.InCollective(dump) {
					h.Stuck.Rank, h.Frame, waiting = rank, gang.TopFrame(dump), false
					break
				}
				waiting = waiting && ok
			}
			if waiting {
				if time.Since(noticed) < hangGrace(timeout) {
					continue
				}
				h.Waiting, h.Frame = true, gang.TopFrame(stacks[st.Rank])
			}
			if g != nil {
				h.Host = g.layout.Members[g.layout.HostOf(h.Stuck.Rank)].Host
			}
			r.log.Warn("a trainer rank stopped advancing; stopping every rank", "rank", h.Stuck.Rank, "step", st.Step, "for", st.For,
				"hang_timeout", timeout, "frame", h.Frame, "waiting_in_collective", h.Waiting)
			hung <- h
			stop()
			return
		}
	}
}

// dumpStacks asks each of ranks that catches SIGUSR1 for its stack
// (process.AskStack),
// and returns the dumps that came within stackWait, by rank.
func (r *trainRun) dumpStacks(ctx context.Context, ranks []int) map[int]string {
	r.mu.Lock()
	procs := maps.Clone(r.procs)
	r.mu.Unlock()
	before := map[int]string{}
	for _, rank := range ranks {
		p, ok := procs[rank]
		if !ok {
			continue
		}
		tail := p.stderr.Tail()
		if process.AskStack(p.pid) {
			before[rank] = tail
		}
	}
	dumps := map[int]string{}
	deadline := time.Now().Add(stackWait)
	for len(dumps) < len(before) && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		for rank, old := range before {
			tail := procs[rank].stderr.Tail()
			if tail == old {
				continue
			}
			if d := gang.StackDump(tail); d != "" && !strings.Contains(old, d) {
				dumps[rank] = d
			}
		}
	}
	return dumps
}

// setProcs records the ranks this worker started.
func (r *trainRun) setProcs(procs map[int]rankProc) {
	r.mu.Lock()
	r.procs = procs
	r.mu.Unlock()
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
	if r.rankEnv != nil {
		cmd.Env = append(cmd.Env, r.rankEnv(0)...)
	}
	process.SetProcessGroup(cmd)
	r.log.Info("trainer starting", "argv", r.w.Argv)
	if err := cmd.Start(); err != nil {
		return nil, nodetype.Permanent(errtype.BadInput, "start %q: %v", r.w.Argv[0], err)
	}
	r.setProcs(map[int]rankProc{0: {pid: cmd.Process.Pid, stderr: stderr}})
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
	g, err := startRanks(cmd, layout, host, stdout, r.log, r.rankLine, r.rankEnv, r.secrets...)
	if err != nil {
		return nil, nodetype.Permanent(errtype.BadInput, "start %q: %v", r.w.Argv[0], err)
	}
	g.exited = r.watch.Done
	procs := map[int]rankProc{}
	for local, c := range g.cmds {
		procs[layout.Rank(host, local)] = rankProc{pid: c.Process.Pid, stderr: g.stderr[local]}
	}
	r.setProcs(procs)
	return g.wait, nil
}
