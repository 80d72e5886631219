package train

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/retrain-ml/retrain/activities/internal/process"
	"github.com/retrain-ml/retrain/internal/gang"
)

// A command trainer with processes: N > 1 runs as N ranks of argv that the
// node starts itself, with torch.distributed's env:// variables, instead of
// under a launcher such as torchrun: the node then supervises every rank
// (a rank that dies takes the others down at once rather than leaving them
// blocked in a collective until a timeout) and reads rank 0's progress.

// processCount is how many ranks of argv the node starts: processes when
// given, else one per leased GPU, except for a program that launches its
// own ranks (torchrun), which runs once as it always has.
func processCount(w With) int {
	switch {
	case w.Processes > 0:
		return w.Processes
	case w.GPUs > 0 && !launchesRanks(w.Argv):
		return w.GPUs
	}
	return 1
}

// launchesRanks reports whether argv runs a launcher that starts the ranks
// itself: torchrun or python -m torch.distributed.run (or .launch), also
// inside a shell command line such as sh -c "torchrun ...".
func launchesRanks(argv []string) bool {
	for _, arg := range argv {
		for _, word := range strings.Fields(arg) {
			switch filepath.Base(word) {
			case "torchrun", "torch.distributed.run", "torch.distributed.launch":
				return true
			}
		}
	}
	return false
}

// localLayout is the layout of n ranks on this worker alone, rank 0
// listening on port of the loopback interface.
func localLayout(host string, n, port int) gang.Layout {
	return gang.Layout{Members: []gang.Member{{Host: host, Address: "127.0.0.1", Port: port}}, Processes: n}
}

// freePort returns a TCP port on address that nothing listens on now,
// for rank 0's rendezvous. Another program may take it before rank 0
// does; the attempt then fails and is retried. The port is drawn below
// Linux's default ephemeral range (32768-60999), where the kernel gives
// out the local ports of outgoing connections and of listeners on port
// 0: a port the kernel chose was taken again by a busy worker's next
// connection before rank 0 bound it ("Address already in use").
func freePort(address string) (int, error) {
	for range 64 {
		port := rendezvousLow + rand.IntN(rendezvousHigh-rendezvousLow)
		if l, err := net.Listen("tcp", net.JoinHostPort(address, strconv.Itoa(port))); err == nil {
			l.Close()
			return port, nil
		}
	}
	l, err := net.Listen("tcp", net.JoinHostPort(address, "0"))
	if err != nil {
		return 0, fmt.Errorf("find a free port for the ranks: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// The range freePort draws from first: [rendezvousLow, rendezvousHigh).
const rendezvousLow, rendezvousHigh = 20000, 32768

// drainWait bounds how long a rank's stdout and stderr are read once its
// process group is gone: a child that left the group can hold them open.
const drainWait = 2 * time.Second

// rankGroup is the running ranks of one attempt.
type rankGroup struct {
	layout gang.Layout
	host   int // this worker's place in layout
	cmds   []*exec.Cmd
	stderr []*process.TailWriter
	// drained[rank] closes once the rank's logged streams reached EOF;
	// abandon[rank] stops reading them.
	drained []chan struct{}
	abandon []func()
	log     *slog.Logger
	exited  func(rank int) // called with each rank's global rank as it ends
}

// envOMPThreads is the thread count of each rank's OpenMP (and so
// PyTorch's intra-op) pool.
const envOMPThreads = "OMP_NUM_THREADS"

// threadsEnv shares the host's cores among its ranks, as torchrun does
// (which sets 1 with more than one rank per host): each rank's PyTorch
// otherwise starts a thread per core, and n ranks oversubscribe the host n
// times, which slows every step and can starve the worker's heartbeats. A
// value the spec or the worker's environment sets wins.
func threadsEnv(env []string, processes, cores int) []string {
	if processes <= 1 {
		return nil
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, envOMPThreads+"=") {
			return nil
		}
	}
	return []string{envOMPThreads + "=" + strconv.Itoa(max(1, cores/processes))}
}

// startRanks starts this host's ranks of layout from base (its program,
// arguments, directory and environment), each in its own process group
// with its torch.distributed environment. This host's first rank's
// standard output goes to stdout0, the progress stream; every other
// stream is logged, the other ranks' stdout lines also going to onLine
// with their global rank (for their steps), and each rank's stderr tail
// is kept for the error that names it. rankEnv, when not nil, adds a
// rank's own variables (by global rank). When a rank cannot start, those
// started are stopped and the error is the start's.
//
// The logged streams are pipes the group reads itself rather than writers
// exec copies to: exec's Wait would wait for the copy to end, which a child
// the rank left running (a data loader) can delay until it is killed, and
// it is killed only once Wait returned. A rank's failure must stop the
// others at once. The secrets' values are masked in every logged stream.
func startRanks(base *exec.Cmd, layout gang.Layout, host int, stdout0 *os.File, log *slog.Logger, onLine func(rank int, line string), rankEnv func(rank int) []string, secrets ...string) (*rankGroup, error) {
	g := &rankGroup{layout: layout, host: host, log: log, exited: func(int) {}}
	for local := range layout.Processes {
		rank := layout.Rank(host, local)
		cmd := exec.Command(base.Path, base.Args[1:]...)
		cmd.Args[0] = base.Args[0]
		cmd.Dir = base.Dir
		cmd.Env = append(append([]string(nil), base.Env...), layout.Env(host, local)...)
		cmd.Env = append(cmd.Env, threadsEnv(base.Env, layout.Processes, runtime.NumCPU())...)
		if rankEnv != nil {
			cmd.Env = append(cmd.Env, rankEnv(rank)...)
		}
		rlog := log.With("rank", rank)
		stderr := process.NewTailWriter(process.OutputTail, rlog, "stderr").Mask(secrets)
		writers := []io.Writer{stderr}
		if local > 0 {
			out := process.NewTailWriter(process.OutputTail, rlog, "stdout").Mask(secrets)
			if onLine != nil {
				out.OnLine(func(line string) { onLine(rank, line) })
			}
			writers = append(writers, out)
		}
		ends, drained, abandon, err := readPipes(writers)
		if err != nil {
			g.stop()
			return nil, err
		}
		cmd.Stderr, cmd.Stdout = ends[0], stdout0
		if local > 0 {
			cmd.Stdout = ends[1]
		}
		process.SetProcessGroup(cmd)
		err = cmd.Start()
		for _, f := range ends {
			f.Close() // the rank holds them now
		}
		if err != nil {
			abandon()
			g.stop()
			return nil, err
		}
		g.cmds = append(g.cmds, cmd)
		g.stderr = append(g.stderr, stderr)
		g.drained = append(g.drained, drained)
		g.abandon = append(g.abandon, abandon)
	}
	m0 := layout.Members[0]
	log.Info("trainer ranks started", "ranks", layout.Processes, "first_rank", layout.Rank(host, 0), "world_size", layout.World(),
		"master_addr", m0.Address, "master_port", m0.Port)
	return g, nil
}

// readPipes makes a pipe per writer and copies each pipe's read end into
// its writer until EOF. It returns the write ends for the child, a channel
// closed when every copy has ended, and a func that ends them at once.
func readPipes(writers []io.Writer) ([]*os.File, chan struct{}, func(), error) {
	var (
		ends    []*os.File
		readers []*os.File
		wg      sync.WaitGroup
	)
	closeReaders := func() {
		for _, r := range readers {
			r.Close()
		}
	}
	for _, w := range writers {
		r, wr, err := os.Pipe()
		if err != nil {
			closeReaders()
			for _, f := range ends {
				f.Close()
			}
			return nil, nil, nil, err
		}
		readers, ends = append(readers, r), append(ends, wr)
		wg.Go(func() { _, _ = io.Copy(w, r) })
	}
	drained := make(chan struct{})
	go func() {
		wg.Wait()
		closeReaders()
		close(drained)
	}()
	return ends, drained, closeReaders, nil
}

// stop ends the ranks started so far, when a later one could not start.
func (g *rankGroup) stop() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for rank, cmd := range g.cmds {
		_ = process.WaitOrKill(ctx, cmd, g.log)
		g.abandon[rank]()
	}
}

// drain waits for a rank's logged streams to end (its group was killed,
// so they end unless a child escaped it), but not past drainWait.
func (g *rankGroup) drain(rank int) {
	select {
	case <-g.drained[rank]:
	case <-time.After(drainWait):
		g.abandon[rank]()
		<-g.drained[rank]
	}
	g.stderr[rank].Flush()
}

// RankError is a rank that failed: it exited with a non-zero code or was
// killed by a signal the node did not send. The node stopped the others.
type RankError struct {
	Rank, Ranks int
	// Host names the rank's host when the ranks span several.
	Host    string
	Program string
	Code    int   // the exit code; -1 when a signal ended it
	Err     error // the wait error, naming the signal
	Stderr  string
}

func (e *RankError) Error() string {
	how := fmt.Sprintf("exited with code %d", e.Code)
	if e.Code < 0 {
		how = fmt.Sprintf("was killed (%v)", e.Err)
	}
	on := ""
	if e.Host != "" {
		on = " on host " + e.Host
	}
	return fmt.Sprintf("rank %d of %d%s (%s) %s, so the other ranks were stopped; its stderr: %s",
		e.Rank, e.Ranks, on, e.Program, how, process.LastLines(e.Stderr, 5))
}

// wait waits for every rank to end. The first rank to fail, or ctx
// ending, stops all the others (SIGTERM to each process group, SIGKILL
// after process.KillGrace); wait then returns that rank's *RankError, or
// nil when every rank exited 0 or ctx ended first (the caller tells that
// case by ctx). Whatever a rank left running in its group is killed.
func (g *rankGroup) wait(ctx context.Context) error {
	stopCtx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	type exit struct {
		rank int
		err  error
	}
	exits := make(chan exit, len(g.cmds))
	for rank, cmd := range g.cmds {
		go func() {
			exits <- exit{rank, process.WaitOrKill(stopCtx, cmd, g.log.With("rank", rank))}
		}()
	}
	var failed *RankError
	for range g.cmds {
		e := <-exits
		g.exited(g.layout.Rank(g.host, e.rank))
		g.drain(e.rank)
		code := g.cmds[e.rank].ProcessState.ExitCode()
		// A rank that ends once the others are being stopped is not to
		// blame: it is ending because it was told to, or because a peer
		// it was talking to went away.
		if code == 0 || stopCtx.Err() != nil {
			continue
		}
		failed = &RankError{
			Rank: g.layout.Rank(g.host, e.rank), Ranks: g.layout.World(), Program: g.cmds[e.rank].Args[0],
			Code: code, Err: e.err, Stderr: g.stderr[e.rank].Tail(),
		}
		if len(g.layout.Members) > 1 {
			failed.Host = g.layout.Members[g.host].Host
		}
		g.log.Warn("trainer rank failed; stopping the other ranks", "rank", failed.Rank, "exit_code", code, "error", e.err)
		stopAll()
	}
	if failed == nil {
		return nil // not a nil *RankError in a non-nil error
	}
	return failed
}
