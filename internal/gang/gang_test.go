package gang

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLayoutEnv(t *testing.T) {
	l := Layout{Members: []Member{
		{Host: "a", Address: "10.0.0.1", Interface: "eth1", Port: 29500},
		{Host: "b", Address: "10.0.0.2", Interface: "ib0", Port: 41000},
	}, Processes: 2}
	if l.World() != 4 || l.Rank(1, 1) != 3 || l.HostOf(3) != 1 || l.HostOf(1) != 0 {
		t.Fatalf("world %d, rank(1,1) %d, hostOf(3) %d", l.World(), l.Rank(1, 1), l.HostOf(3))
	}
	got := l.Env(1, 0)
	for _, want := range []string{
		"MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500", // host 0's, not this host's
		"RANK=2", "LOCAL_RANK=0", "WORLD_SIZE=4", "LOCAL_WORLD_SIZE=2",
		"NODE_RANK=1", "GROUP_RANK=1", "RETRAIN_HOSTS=2", "RETRAIN_HOST_ID=b",
		"GLOO_SOCKET_IFNAME=ib0", "NCCL_SOCKET_IFNAME=ib0", // this host's interface
	} {
		if !slices.Contains(got, want) {
			t.Errorf("env of host 1 rank 0: no %s in %v", want, got)
		}
	}
	one := Layout{Members: []Member{{Host: "solo", Address: "127.0.0.1", Port: 1234}}, Processes: 1}
	for _, v := range one.Env(0, 0) {
		if strings.HasPrefix(v, "GLOO_SOCKET_IFNAME=") {
			t.Errorf("a host without a known interface sets %s", v)
		}
	}
}

func TestCheck(t *testing.T) {
	m := func(host, addr string) Member { return Member{Host: host, Address: addr, Port: 1} }
	tests := []struct {
		members []Member
		wantErr string
	}{
		{[]Member{m("a", "10.0.0.1"), m("b", "10.0.0.2")}, ""},
		{[]Member{m("a", "127.0.0.1"), m("b", "127.0.0.1")}, ""}, // one machine, distinct ids
		{[]Member{m("a", "10.0.0.1"), m("a", "10.0.0.2")}, `host "a" joined twice`},
		{[]Member{m("a", "10.0.0.1"), m("b", "127.0.1.1")}, "b=127.0.1.1 advertise a loopback address"},
		{[]Member{m("a", "node-a"), m("b", "10.0.0.2")}, "not an IP address"},
		{[]Member{{Host: "a", Address: "10.0.0.1"}}, "offers port 0"},
	}
	for _, tt := range tests {
		err := Check(tt.members)
		if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("Check(%v) = %v, want %q", tt.members, err, tt.wantErr)
		}
	}
}

func TestWatchStuck(t *testing.T) {
	w := NewWatch()
	t0 := time.Unix(1000, 0)
	if _, ok := w.Stuck(t0.Add(time.Hour), time.Second); ok {
		t.Fatal("a rank that never reported is stuck: startup must not count")
	}
	for s := int64(1); s <= 5; s++ {
		w.Step(0, s, t0.Add(time.Duration(s)*time.Second))
		w.Step(1, s, t0.Add(time.Duration(s)*time.Second))
	}
	// Rank 0 goes on to step 6 and then waits in the all-reduce for rank 1.
	w.Step(0, 6, t0.Add(6*time.Second))
	w.Step(1, 5, t0.Add(7*time.Second)) // a repeated step is no progress
	if _, ok := w.Stuck(t0.Add(20*time.Second), 20*time.Second); ok {
		t.Fatal("stuck before the timeout")
	}
	st, ok := w.Stuck(t0.Add(27*time.Second), 20*time.Second)
	if !ok || st.Rank != 1 || st.Step != 5 || st.For != 22*time.Second || !slices.Equal(st.Ranks, []int{1, 0}) {
		t.Fatalf("Stuck = %+v, %v: want rank 1 at step 5 for 22s, rank 0 stuck after it", st, ok)
	}
	w.Done(1)
	if st, ok := w.Stuck(t0.Add(27*time.Second), 20*time.Second); !ok || st.Rank != 0 {
		t.Fatalf("after rank 1 exited: %+v, %v: want rank 0", st, ok)
	}
	p := w.Progress()
	if len(p) != 2 || p[0].Step != 6 || p[1].Step != 5 || p[0].StepsPerSec != 1 {
		t.Errorf("Progress = %+v", p)
	}
}

func TestSlowest(t *testing.T) {
	if h, _, ok := Slowest(map[string]float64{"a": 10, "b": 9, "c": 10}); ok {
		t.Errorf("9 of a median 10 is named the straggler (%s)", h)
	}
	h, ratio, ok := Slowest(map[string]float64{"a": 10, "b": 5, "c": 11})
	if !ok || h != "b" || ratio != 0.5 {
		t.Errorf("Slowest = %s %v %v, want b at 0.5", h, ratio, ok)
	}
	if _, _, ok := Slowest(map[string]float64{"a": 10}); ok {
		t.Error("one host is a straggler")
	}
	if got := HostPace([]RankProgress{{StepsPerSec: 3}, {StepsPerSec: 2}}); got != 2 {
		t.Errorf("HostPace = %v, want the slowest rank's 2", got)
	}
}

func TestJoinError(t *testing.T) {
	e := &JoinError{Joined: 1, Want: 2, Hosts: []string{"solo"}, Seen: []string{"solo", "b"}, Queue: "retrain-gpu", Timeout: "20s",
		Failed: map[string]string{"b": "node asks for 9 GPUs: not enough healthy GPUs"}}
	msg := e.Error()
	for _, want := range []string{"1 of 2 hosts joined", "gang_timeout 20s", "(joined: solo)", `queue "retrain-gpu"`, "2 live host(s): solo, b",
		"b did not join: node asks for 9 GPUs", "no rank started", "start 1 more worker"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q: no %q", msg, want)
		}
	}
}

// TestJoinErrorNamesHostsSorted: hosts join in any order; the error names
// them the same way every time, so that two reports of one failure match.
func TestJoinErrorNamesHostsSorted(t *testing.T) {
	e := &JoinError{Joined: 2, Want: 3, Hosts: []string{"h2", "h1"}, Queue: "q", Timeout: "1m"}
	if msg := e.Error(); !strings.Contains(msg, "(joined: h1, h2)") {
		t.Errorf("%q: want the joined hosts sorted", msg)
	}
}
