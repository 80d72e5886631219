// Package gang is the pure logic of a training gang: a train node with
// hosts: N runs one group of ranks on each of N hosts, started together
// and stopped together. It lays out the ranks and their torch.distributed
// environment, tells a stuck rank from a slow one, and names the slowest
// host. The Temporal side (forming the gang on distinct workers, the
// barrier, the restarts) is activities/train's.
package gang

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/retrain-ml/retrain/internal/trainer"
)

// Environment a rank gets besides trainer's: which host of the gang it is
// on, and how many hosts there are (torchrun's names, so programs written
// for it read them).
const (
	EnvNodeRank  = "NODE_RANK"
	EnvGroupRank = "GROUP_RANK"
	EnvHosts     = "RETRAIN_HOSTS"
	EnvHostID    = "RETRAIN_HOST_ID"
	// The collective libraries' interface choice: without it gloo and NCCL
	// pick the interface the host name resolves to, which /etc/hosts often
	// maps to 127.0.1.1, and the hosts never meet.
	EnvGlooIfname = "GLOO_SOCKET_IFNAME"
	EnvNCCLIfname = "NCCL_SOCKET_IFNAME"
)

// Member is one host of a gang, as its worker joined it.
type Member struct {
	Host      string   `json:"host"`                // the worker's --host-id
	Address   string   `json:"address"`             // the address the other hosts reach it on
	Interface string   `json:"interface,omitempty"` // the network interface of Address, when known
	Port      int      `json:"port"`                // a port free on it when it joined: rank 0's rendezvous if it is host 0
	GPUs      []string `json:"gpus,omitempty"`      // the GPUs it leased for the gang (UUIDs)
}

// Layout is where a gang's ranks run: Processes ranks on each member, the
// first member's first rank being rank 0.
type Layout struct {
	Members   []Member
	Processes int
}

// World is the number of ranks.
func (l Layout) World() int { return len(l.Members) * l.Processes }

// Rank is the global rank of local rank local on host.
func (l Layout) Rank(host, local int) int { return host*l.Processes + local }

// HostOf is the host index of a global rank.
func (l Layout) HostOf(rank int) int { return rank / max(l.Processes, 1) }

// Env is the torch.distributed environment of local rank local on host:
// MASTER_ADDR and MASTER_PORT (host 0's), RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, NODE_RANK and GROUP_RANK, RETRAIN_HOSTS and
// RETRAIN_HOST_ID, and the collective libraries' interface when the host's
// is known.
func (l Layout) Env(host, local int) []string {
	m0, me := l.Members[0], l.Members[host]
	env := []string{
		trainer.EnvMasterAddr + "=" + m0.Address,
		trainer.EnvMasterPort + "=" + strconv.Itoa(m0.Port),
		trainer.EnvRank + "=" + strconv.Itoa(l.Rank(host, local)),
		trainer.EnvLocalRank + "=" + strconv.Itoa(local),
		trainer.EnvWorldSize + "=" + strconv.Itoa(l.World()),
		trainer.EnvLocalWorldSize + "=" + strconv.Itoa(l.Processes),
		EnvNodeRank + "=" + strconv.Itoa(host),
		EnvGroupRank + "=" + strconv.Itoa(host),
		EnvHosts + "=" + strconv.Itoa(len(l.Members)),
		EnvHostID + "=" + me.Host,
	}
	if me.Interface != "" {
		env = append(env, EnvGlooIfname+"="+me.Interface, EnvNCCLIfname+"="+me.Interface)
	}
	return env
}

// Check refuses a gang its ranks could not form: two members that are the
// same host, an address that is not an IP, or a loopback address among
// members that are not all on loopback (ranks on another host would dial
// their own machine). Members all on loopback are workers of one machine
// started with distinct --host-id, which is allowed (a test, a laptop).
func Check(members []Member) error {
	seen := map[string]bool{}
	loop := 0
	for _, m := range members {
		if seen[m.Host] {
			return fmt.Errorf("host %q joined twice: a gang's hosts must be distinct workers", m.Host)
		}
		seen[m.Host] = true
		ip, err := netip.ParseAddr(m.Address)
		if err != nil {
			return fmt.Errorf("host %q advertises %q, not an IP address: set its --advertise-address", m.Host, m.Address)
		}
		if ip.IsLoopback() {
			loop++
		}
		if m.Port < 1 || m.Port > 65535 {
			return fmt.Errorf("host %q offers port %d", m.Host, m.Port)
		}
	}
	if loop > 0 && loop < len(members) {
		var on []string
		for _, m := range members {
			if ip, _ := netip.ParseAddr(m.Address); ip.IsLoopback() {
				on = append(on, m.Host+"="+m.Address)
			}
		}
		return fmt.Errorf("hosts %s advertise a loopback address, which the other hosts cannot reach: "+
			"start their workers with --advertise-address or --advertise-interface", strings.Join(on, ", "))
	}
	return nil
}

// Hosts are the members' host ids, in gang order.
func Hosts(members []Member) []string {
	out := make([]string, len(members))
	for i, m := range members {
		out[i] = m.Host
	}
	return out
}

// JoinError is a gang that did not form in time: every lease it took was
// released, and no rank started.
type JoinError struct {
	Joined, Want int
	Hosts        []string          // the hosts that joined
	Seen         []string          // the live hosts the queue had
	Failed       map[string]string // why hosts that were tried did not join, by host
	Queue        string
	Timeout      string // gang_timeout
	// NodeTimeout is the node's timeout when it, not gang_timeout, ended
	// the forming (it bounds the whole attempt); "" otherwise.
	NodeTimeout string
}

func (e *JoinError) Error() string {
	joined := "none"
	if len(e.Hosts) > 0 {
		joined = strings.Join(Sorted(e.Hosts), ", ")
	}
	seen := "no worker with a host id polled it"
	if len(e.Seen) > 0 {
		seen = fmt.Sprintf("it had %d live host(s): %s", len(e.Seen), strings.Join(e.Seen, ", "))
	}
	why := ""
	for _, h := range Sorted(slices.Collect(maps.Keys(e.Failed))) {
		why += fmt.Sprintf("; %s did not join: %s", h, e.Failed[h])
	}
	within := "gang_timeout " + e.Timeout
	if e.NodeTimeout != "" {
		within = fmt.Sprintf("the node's timeout %s (which bounds the whole attempt and caps gang_timeout %s)", e.NodeTimeout, e.Timeout)
	}
	return fmt.Sprintf("%d of %d hosts joined the gang within %s (joined: %s); queue %q lacked workers: %s%s. "+
		"Their GPU leases were released and no rank started; start %d more worker(s) on the queue, each with its own --host-id",
		e.Joined, e.Want, within, joined, e.Queue, seen, why, e.Want-e.Joined)
}

// Sorted returns hosts sorted, without duplicates.
func Sorted(hosts []string) []string {
	out := slices.Clone(hosts)
	slices.Sort(out)
	return slices.Compact(out)
}
