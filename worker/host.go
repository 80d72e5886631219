package worker

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/spf13/pflag"

	"github.com/retrain-ml/retrain/activities/train"
	"github.com/retrain-ml/retrain/internal/gang"
)

// Environment variables that default the host flags.
const (
	EnvHostID             = "RETRAIN_HOST_ID"
	EnvAdvertiseAddress   = "RETRAIN_ADVERTISE_ADDRESS"
	EnvAdvertiseInterface = "RETRAIN_ADVERTISE_INTERFACE"
	EnvMaxProcesses       = "RETRAIN_MAX_PROCESSES_PER_HOST"
	EnvMaxHosts           = "RETRAIN_MAX_HOSTS"
)

// HostConfig is the worker as a host of training gangs (a train node with
// hosts: N runs one group of ranks on each of N workers, see
// activities/train/gang.go): its id, and the address its ranks are
// reached on by the ranks of the other hosts.
type HostConfig struct {
	// ID names the host; two workers with one id are one host, which a
	// gang never places twice. Default: the machine's host name.
	ID string
	// AdvertiseAddress is the IP the other hosts reach this one on;
	// AdvertiseInterface names the interface whose address that is.
	// Default: the address of the interface that reaches Frontend.
	AdvertiseAddress   string
	AdvertiseInterface string
	// Frontend is the Temporal frontend's HOST:PORT, which the default
	// address is the way to; the CLI sets it from --address.
	Frontend string
	// MaxProcesses bounds the ranks one train node starts on this worker
	// (its processes, or one per GPU); MaxHosts the hosts of a gang this
	// worker joins or a run it resolves asks for. 0: the defaults
	// (gang.DefaultLimits: this machine's CPU cores or GPUs, whichever is
	// more; 16 hosts). The validator refuses a run past the resolving
	// worker's limits, and every worker refuses a node past its own
	// before anything starts.
	MaxProcesses int
	MaxHosts     int
	// envErr is a limit's environment variable that is not a number.
	envErr error
}

func (h *HostConfig) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&h.ID, "host-id", os.Getenv(EnvHostID),
		"this worker's name as a host of multi-host training; workers with one id count as one host (default: the host name; env "+EnvHostID+")")
	fs.StringVar(&h.AdvertiseAddress, "advertise-address", os.Getenv(EnvAdvertiseAddress),
		"the IP other hosts' training ranks reach this worker's ranks on (default: the address of the interface that reaches the Temporal frontend; env "+EnvAdvertiseAddress+")")
	fs.StringVar(&h.AdvertiseInterface, "advertise-interface", os.Getenv(EnvAdvertiseInterface),
		"the network interface whose address to advertise, e.g. eth1; also sets GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME for the ranks (env "+EnvAdvertiseInterface+")")
	fs.IntVar(&h.MaxProcesses, "max-processes-per-host", h.envInt(EnvMaxProcesses),
		"the most ranks one train node may start on this worker (its processes, or one per GPU); runs that ask for more are refused before anything starts (default: this machine's CPU cores or GPUs, whichever is more; env "+EnvMaxProcesses+")")
	fs.IntVar(&h.MaxHosts, "max-hosts", h.envInt(EnvMaxHosts),
		fmt.Sprintf("the most hosts one train node's gang may span; runs that ask for more are refused before anything starts (default %d; env %s)", gang.DefaultMaxHosts, EnvMaxHosts))
}

// envInt is the number in the environment variable name, 0 when unset; a
// value that is not one is reported by limits.
func (h *HostConfig) envInt(name string) int {
	v := os.Getenv(name)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		h.envErr = fmt.Errorf("%s=%q: want a whole number", name, v)
	}
	return n
}

// limits are what one train node may ask of this worker, on a machine
// with cores CPU cores and gpus healthy GPUs (those of --gpu; 0 without).
func (h HostConfig) limits(cores, gpus int) (gang.Limits, error) {
	if h.envErr != nil {
		return gang.Limits{}, h.envErr
	}
	if h.MaxProcesses < 0 {
		return gang.Limits{}, fmt.Errorf("--max-processes-per-host %d: want a positive number (0: the default)", h.MaxProcesses)
	}
	if h.MaxHosts < 0 {
		return gang.Limits{}, fmt.Errorf("--max-hosts %d: want a positive number (0: the default)", h.MaxHosts)
	}
	l := gang.DefaultLimits(cores, gpus)
	if h.MaxProcesses > 0 {
		l.MaxProcesses = h.MaxProcesses
	}
	if h.MaxHosts > 0 {
		l.MaxHosts = h.MaxHosts
	}
	return l, nil
}

// hostIDPattern is what a host id may be: it is a segment of a task
// queue's name and of the worker's identity.
var hostIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// resolve returns the worker's host: its id and advertised address, with
// the address's interface.
func (h HostConfig) resolve(logger *slog.Logger) (train.Host, error) {
	id := h.ID
	if id == "" {
		name, err := os.Hostname()
		if err != nil {
			return train.Host{}, fmt.Errorf("--host-id: cannot read the host name (%v); set --host-id", err)
		}
		id = name
	}
	if !hostIDPattern.MatchString(id) {
		return train.Host{}, fmt.Errorf("--host-id %q: want letters, digits, '.', '_' or '-', at most 128, starting with a letter or digit", id)
	}
	host := train.Host{ID: id}
	ifaces, err := interfaceAddrs()
	if err != nil {
		return train.Host{}, fmt.Errorf("list network interfaces: %w", err)
	}
	switch {
	case h.AdvertiseAddress != "":
		ip, err := netip.ParseAddr(h.AdvertiseAddress)
		if err != nil {
			return train.Host{}, fmt.Errorf("--advertise-address %q: not an IP address", h.AdvertiseAddress)
		}
		host.Address = ip.String()
		host.Interface = ifaceOf(ifaces, ip)
		if h.AdvertiseInterface != "" && host.Interface != h.AdvertiseInterface {
			return train.Host{}, fmt.Errorf("--advertise-address %s is not an address of --advertise-interface %s", ip, h.AdvertiseInterface)
		}
	case h.AdvertiseInterface != "":
		addrs, ok := ifaces[h.AdvertiseInterface]
		if !ok {
			return train.Host{}, fmt.Errorf("--advertise-interface %q: no such interface (have %s)", h.AdvertiseInterface, strings.Join(slices.Sorted(maps.Keys(ifaces)), ", "))
		}
		ip, ok := firstIPv4(addrs)
		if !ok {
			return train.Host{}, fmt.Errorf("--advertise-interface %q has no IPv4 address", h.AdvertiseInterface)
		}
		host.Address, host.Interface = ip.String(), h.AdvertiseInterface
	default:
		ip := routeTo(h.Frontend)
		host.Address = ip.String()
		host.Interface = ifaceOf(ifaces, ip)
		if ip.IsLoopback() {
			// Debug: every dev stack's worker is here, and a gang that
			// mixes it with other hosts is refused with this advice.
			logger.Debug("this worker advertises a loopback address to training gangs: only gangs whose hosts are all on this machine can use it; "+
				"set --advertise-address or --advertise-interface for hosts on other machines", "address", host.Address)
		}
	}
	if ip, _ := netip.ParseAddr(host.Address); ip.IsLoopback() {
		host.Interface = "" // the collective libraries find lo themselves
	}
	return host, nil
}

// routeTo returns the local address of the route to the frontend: the
// interface that reaches Temporal is the one the other workers reach too.
// A UDP "dial" sends nothing. Without a frontend, or when it cannot be
// routed to, it is loopback.
func routeTo(frontend string) netip.Addr {
	loop := netip.MustParseAddr("127.0.0.1")
	if frontend == "" {
		return loop
	}
	host, port, err := net.SplitHostPort(frontend)
	if err != nil {
		return loop
	}
	conn, err := net.DialTimeout("udp", net.JoinHostPort(host, port), 2*time.Second)
	if err != nil {
		return loop
	}
	defer conn.Close()
	ap, err := netip.ParseAddrPort(conn.LocalAddr().String())
	if err != nil {
		return loop
	}
	return ap.Addr().Unmap()
}

func interfaceAddrs() (map[string][]netip.Addr, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	out := map[string][]netip.Addr{}
	for _, i := range ifs {
		addrs, err := i.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				out[i.Name] = append(out[i.Name], p.Addr())
			}
		}
		if _, ok := out[i.Name]; !ok {
			out[i.Name] = nil
		}
	}
	return out, nil
}

func ifaceOf(ifaces map[string][]netip.Addr, ip netip.Addr) string {
	for name, addrs := range ifaces {
		if slices.Contains(addrs, ip) {
			return name
		}
	}
	return ""
}

func firstIPv4(addrs []netip.Addr) (netip.Addr, bool) {
	for _, a := range addrs {
		if a.Is4() {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// identitySuffix marks a worker identity that carries a host id: the
// gang reads the live hosts of a queue from its pollers' identities.
const identitySuffix = "@retrain"

// identity is the worker's Temporal identity, "PID@HOST-ID@retrain": the
// SDK's default shape (PID@HOSTNAME@), with the host id for the name.
func identity(host string) string {
	return fmt.Sprintf("%d@%s%s", os.Getpid(), host, identitySuffix)
}

// hostOfIdentity returns the host id a worker identity carries.
func hostOfIdentity(id string) (string, bool) {
	rest, ok := strings.CutSuffix(id, identitySuffix)
	if !ok {
		return "", false
	}
	_, host, ok := strings.Cut(rest, "@")
	return host, ok && hostIDPattern.MatchString(host)
}

// pollerFreshness is how recently a worker must have polled to count as
// live. A worker with nothing to do re-polls about every minute (the
// server holds a poll that long), so a live one is seen within it.
const pollerFreshness = 90 * time.Second

// hostDirectory lists the live hosts that poll a queue, from the server's
// record of the queue's pollers.
func hostDirectory(c client.Client, namespace string) train.HostDirectory {
	return func(ctx context.Context, queue string) ([]string, error) {
		resp, err := c.WorkflowService().DescribeTaskQueue(ctx, &workflowservice.DescribeTaskQueueRequest{
			Namespace:     namespace,
			TaskQueue:     &taskqueuepb.TaskQueue{Name: queue, Kind: enumspb.TASK_QUEUE_KIND_NORMAL},
			TaskQueueType: enumspb.TASK_QUEUE_TYPE_ACTIVITY,
		})
		if err != nil {
			return nil, fmt.Errorf("describe task queue %s: %w", queue, err)
		}
		var hosts []string
		for _, p := range resp.GetPollers() {
			if t := p.GetLastAccessTime(); t != nil && time.Since(t.AsTime()) > pollerFreshness {
				continue
			}
			if h, ok := hostOfIdentity(p.GetIdentity()); ok {
				hosts = append(hosts, h)
			}
		}
		slices.Sort(hosts)
		return slices.Compact(hosts), nil
	}
}
