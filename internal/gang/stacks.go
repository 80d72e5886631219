package gang

import (
	"strings"
)

// A rank's stack, as Python's faulthandler prints it on a signal the
// trainer registered (faulthandler.register(signal.SIGUSR1,
// all_threads=True)), tells a rank stuck in its own code from one waiting
// in a collective for it: in a synchronous gang both stop at the same
// step, and nothing else outside the rank tells them apart (gloo reads
// what peers send on a thread of its own, so even the sleeper's sockets
// are drained).

// collectiveFrames mark a frame inside torch.distributed's collectives or
// DDP's gradient reduction (which waits in backward); collectiveFuncs, a
// function whose name says it runs or waits for one (a trainer that waits
// on an async collective's work.wait() from its own code names that code
// so, as examples/torch/train.py's wait_all_reduce does).
var (
	collectiveFrames = []string{"/torch/distributed/", "/torch/nn/parallel/distributed.py", "/torch/autograd/"}
	collectiveFuncs  = []string{"all_reduce", "allreduce", "all_gather", "broadcast", "barrier", "reduce_scatter", "all_to_all", "collective"}
)

// StackDump is the last faulthandler dump in stderr, "" when there is none.
func StackDump(stderr string) string {
	i := max(strings.LastIndex(stderr, "Current thread 0x"), strings.LastIndex(stderr, "Thread 0x"))
	if i < 0 {
		return ""
	}
	// The dump's first thread: walk back over the threads printed before it.
	for {
		j := max(strings.LastIndex(stderr[:i], "Current thread 0x"), strings.LastIndex(stderr[:i], "Thread 0x"))
		if j < 0 || strings.Contains(stderr[j:i], "\n\n\n") || !threadBlock(stderr[j:i]) {
			break
		}
		i = j
	}
	return strings.TrimSpace(stderr[i:])
}

// threadBlock reports whether s is one thread's block of a dump: its
// header and File lines.
func threadBlock(s string) bool {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) == 0 || !strings.HasSuffix(lines[0], "(most recent call first):") {
		return false
	}
	for _, l := range lines[1:] {
		if l != "" && !strings.HasPrefix(l, "  File ") && !strings.HasPrefix(l, "  <no Python frame>") {
			return false
		}
	}
	return true
}

// InCollective reports whether any thread of dump is inside a collective.
func InCollective(dump string) bool {
	for _, l := range strings.Split(dump, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "File ") {
			continue
		}
		for _, m := range collectiveFrames {
			if strings.Contains(l, m) {
				return true
			}
		}
		if i := strings.LastIndex(l, " in "); i >= 0 {
			fn := strings.ToLower(strings.TrimSpace(l[i+len(" in "):]))
			for _, m := range collectiveFuncs {
				if strings.Contains(fn, m) {
					return true
				}
			}
		}
	}
	return false
}

// TopFrame is the innermost frame of the dump's current thread (the one
// that took the signal, else the first printed): where the rank is.
func TopFrame(dump string) string {
	blocks := strings.Split(dump, "\n\n")
	pick := blocks[0]
	for _, b := range blocks {
		if strings.HasPrefix(strings.TrimSpace(b), "Current thread") {
			pick = b
		}
	}
	for _, l := range strings.Split(pick, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "File ") {
			return l
		}
	}
	return ""
}
