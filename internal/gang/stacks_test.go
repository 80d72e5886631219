package gang

import "testing"

// Dumps printed by faulthandler (Python 3.11, torch 1.13) of two gloo
// ranks: rank 0 in all_reduce waiting for rank 1, which sleeps.
const (
	waiterStderr = `rank 0 of 2: pid 4242, device cpu
Current thread 0x00007fd2ef506040 (most recent call first):
  File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", line 1541 in all_reduce
  File "/tmp/fh2.py", line 8 in <module>
`
	sleeperStderr = `{"step": 5}
rank 1 stops advancing after step 5 (TRAIN_PY_HANG_AT)
Thread 0x00007f95e24046c0 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 324 in wait
  File "/usr/lib/python3.11/threading.py", line 975 in run

Current thread 0x00007f79d3257040 (most recent call first):
  File "/work/examples/torch/train.py", line 338 in main
  File "/work/examples/torch/train.py", line 362 in <module>
`
)

func TestStacks(t *testing.T) {
	w, s := StackDump(waiterStderr), StackDump(sleeperStderr)
	if !InCollective(w) || InCollective(s) {
		t.Fatalf("InCollective: waiter %v, sleeper %v\nwaiter:\n%s\nsleeper:\n%s", InCollective(w), InCollective(s), w, s)
	}
	if got := TopFrame(s); got != `File "/work/examples/torch/train.py", line 338 in main` {
		t.Errorf("sleeper's top frame %q", got)
	}
	if got := TopFrame(w); got != `File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", line 1541 in all_reduce` {
		t.Errorf("waiter's top frame %q", got)
	}
	if d := StackDump(sleeperStderr); d[:len("Thread 0x")] != "Thread 0x" {
		t.Errorf("the dump does not start at its first thread: %q", d)
	}
	own := "Current thread 0x1 (most recent call first):\n  File \"train.py\", line 40 in wait_all_reduce\n  File \"train.py\", line 298 in main\n"
	if !InCollective(StackDump(own)) {
		t.Error("a trainer's own function waiting on an all-reduce is not a collective")
	}
	if StackDump("loss is nan\n") != "" || InCollective("") || TopFrame("") != "" {
		t.Error("stderr without a dump")
	}
}
