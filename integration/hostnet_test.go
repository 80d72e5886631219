package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// hostNet is separate hosts on this machine for multi-host tests: each
// host a network namespace with its own address on a veth pair whose
// other end is on a bridge the test made (link-local 169.254.N.0/24, so
// no traffic leaves the machine), the bridge holding the gateway address
// through which the hosts reach the test's servers. Ranks on two hosts
// then meet over a real non-loopback address, and a wrong interface
// choice (loopback, 127.0.1.1) fails. Where namespaces cannot be made
// (not root, no ip command), the hosts are processes on loopback with
// distinct host ids, and why is set.
type hostNet struct {
	gateway string   // the address servers are forwarded on
	hosts   []string // the namespaces, "" on loopback
	addrs   []string // each host's address
	why     string   // why the hosts are on loopback
}

func newHostNet(t *testing.T, n int) *hostNet {
	t.Helper()
	h, err := makeHostNet(t, n)
	if err == nil {
		t.Logf("hosts in network namespaces %v with addresses %v, gateway %s", h.hosts, h.addrs, h.gateway)
		return h
	}
	h = &hostNet{gateway: "127.0.0.1", hosts: make([]string, n), why: err.Error()}
	for range n {
		h.addrs = append(h.addrs, "127.0.0.1")
	}
	t.Logf("FALLBACK: network namespaces unavailable (%v); the hosts are processes on loopback with distinct --host-id, "+
		"so a wrong interface choice cannot fail this test", err)
	return h
}

// hostNets numbers this process's host networks and serializes their
// making: parallel tests each make one, and two that read the routes
// before either added its bridge would pick the same subnet.
var hostNets struct {
	sync.Mutex
	made int
}

func makeHostNet(t *testing.T, n int) (*hostNet, error) {
	hostNets.Lock()
	defer hostNets.Unlock()
	seq := hostNets.made
	hostNets.made++
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("not root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("no ip command (iproute2)")
	}
	routes, err := exec.Command("ip", "-4", "route").Output()
	if err != nil {
		return nil, fmt.Errorf("ip route: %v", err)
	}
	// A /24 of link-local no route of this machine touches.
	// Names hold the process and the network's number (interface names
	// are at most 15 bytes: rtv1234b-0).
	id := fmt.Sprintf("%d%c", os.Getpid()%10000, 'a'+seq%26)
	start := 20 + (os.Getpid()+7*seq)%200
	subnet := ""
	for k := start; k < start+30; k++ {
		s := fmt.Sprintf("169.254.%d.", k%250+1)
		if !strings.Contains(string(routes), s) && !strings.Contains(string(routes), "169.254.0.0/16") {
			subnet = s
			break
		}
	}
	if subnet == "" {
		return nil, fmt.Errorf("no free link-local /24")
	}
	ip := func(args ...string) error {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	bridge := "rtb" + id
	h := &hostNet{gateway: subnet + "1"}
	if err := ip("link", "add", bridge, "type", "bridge"); err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		for _, ns := range h.hosts {
			_ = ip("netns", "del", ns)
		}
		_ = ip("link", "del", bridge)
	})
	for _, args := range [][]string{{"addr", "add", h.gateway + "/24", "dev", bridge}, {"link", "set", bridge, "up"}} {
		if err := ip(args...); err != nil {
			return nil, err
		}
	}
	for i := range n {
		ns, veth, peer := fmt.Sprintf("rth%s-%d", id, i), fmt.Sprintf("rtv%s-%d", id, i), fmt.Sprintf("rtp%s-%d", id, i)
		addr := fmt.Sprintf("%s%d", subnet, 10+i)
		if err := ip("netns", "add", ns); err != nil {
			return nil, err
		}
		h.hosts = append(h.hosts, ns)
		for _, args := range [][]string{
			{"link", "add", veth, "type", "veth", "peer", "name", peer},
			{"link", "set", peer, "netns", ns},
			{"link", "set", veth, "master", bridge, "up"},
			{"-n", ns, "addr", "add", addr + "/24", "dev", peer},
			{"-n", ns, "link", "set", peer, "up"},
			{"-n", ns, "link", "set", "lo", "up"},
		} {
			if err := ip(args...); err != nil {
				return nil, err
			}
		}
		h.addrs = append(h.addrs, addr)
	}
	return h, nil
}

// command is argv run on host i: in its namespace, or as it is.
func (h *hostNet) command(i int, argv ...string) *exec.Cmd {
	if h.hosts[i] == "" {
		return exec.Command(argv[0], argv[1:]...)
	}
	return exec.Command("ip", append([]string{"netns", "exec", h.hosts[i]}, argv...)...)
}

// forward makes target (a server on loopback) reachable from the hosts
// at the gateway: it returns the gateway's HOST:PORT that forwards there.
func (h *hostNet) forward(t *testing.T, target string) string {
	t.Helper()
	if h.gateway == "127.0.0.1" {
		return target
	}
	l, err := net.Listen("tcp", net.JoinHostPort(h.gateway, "0"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer in.Close()
				out, err := (&net.Dialer{}).DialContext(ctx, "tcp", target)
				if err != nil {
					return
				}
				defer out.Close()
				go func() { <-ctx.Done(); in.Close(); out.Close() }()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(out, in); out.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
				go func() { _, _ = io.Copy(in, out); in.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
				<-done
				<-done
			})
		}
	})
	return l.Addr().String()
}
