package devstack

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/membership/static"
	"go.temporal.io/server/common/primitives"
)

const (
	// clusterName matches the Temporal CLI dev server, so a database file
	// made by `temporal server start-dev --db-filename` opens here and the
	// other way round (namespaces record their active cluster by name).
	clusterName = "active"
	// storeName names the single SQL data store used for both persistence
	// and visibility.
	storeName = "sqlite-default"
	// numHistoryShards is fixed at 1 for the life of a database file (the
	// server refuses to change it later). One shard means one owner of all
	// workflow state, which is all a single developer machine needs.
	numHistoryShards = 1
)

// ports are the listening ports of one stack. Only frontend, frontendHTTP
// and ui come from Options; the rest are picked free on Host at every start so that several
// stacks (parallel tests, two checkouts) can run on one machine.
type ports struct {
	frontend     int
	frontendHTTP int
	history      int
	matching     int
	worker       int
	ui           int
}

func allocatePorts(host string, frontend, frontendHTTP, ui int, headless bool) (ports, error) {
	p := ports{frontend: frontend, frontendHTTP: frontendHTTP, ui: ui}
	free := []*int{&p.history, &p.matching, &p.worker}
	if p.frontend == 0 {
		free = append(free, &p.frontend)
	} else if err := checkPortFree(host, p.frontend); err != nil {
		return p, fmt.Errorf("frontend port: %w", err)
	}
	if p.frontendHTTP == 0 {
		free = append(free, &p.frontendHTTP)
	} else if err := checkPortFree(host, p.frontendHTTP); err != nil {
		return p, fmt.Errorf("HTTP API port: %w", err)
	}
	if headless {
		p.ui = 0
	} else if p.ui == 0 {
		free = append(free, &p.ui)
	} else if err := checkPortFree(host, p.ui); err != nil {
		return p, fmt.Errorf("UI port: %w", err)
	}
	// Hold every listener until all ports are picked so the kernel cannot
	// hand the same port out twice within one stack.
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for _, dst := range free {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return p, fmt.Errorf("pick a free port on %s: %w", host, err)
		}
		held = append(held, l)
		*dst = l.Addr().(*net.TCPAddr).Port
	}
	return p, nil
}

// checkPortFree fails early with a readable error when a fixed port is taken.
// The server itself would only notice while binding, and report it through a
// Fatal log call.
func checkPortFree(host string, port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("%s is not available (is another dev stack or Temporal server running?): %w",
			net.JoinHostPort(host, strconv.Itoa(port)), err)
	}
	return l.Close()
}

// serverConfig builds the static server configuration: four services in one
// process bound to bind, reached at advertise (see advertiseHost), one SQLite
// store for persistence and visibility, archival off.
func serverConfig(bind, advertise string, p ports, sqlCfg *config.SQL) *config.Config {
	frontendAddr := net.JoinHostPort(advertise, strconv.Itoa(p.frontend))
	svc := func(grpcPort, httpPort int) config.Service {
		return config.Service{RPC: config.RPC{
			GRPCPort: grpcPort,
			HTTPPort: httpPort,
			BindOnIP: bind,
		}}
	}

	var c config.Config
	// Membership is static (WithStaticHosts), so no ringpop listener exists
	// and membership ports are never opened; the join duration only bounds
	// the service start timeout.
	c.Global.Membership.MaxJoinDuration = 30 * time.Second
	c.Global.Membership.BroadcastAddress = advertise

	c.Persistence.DefaultStore = storeName
	c.Persistence.VisibilityStore = storeName
	c.Persistence.NumHistoryShards = numHistoryShards
	c.Persistence.DataStores = map[string]config.DataStore{storeName: {SQL: sqlCfg}}

	c.ClusterMetadata = &cluster.Config{
		EnableGlobalNamespace:    false,
		FailoverVersionIncrement: 10,
		MasterClusterName:        clusterName,
		CurrentClusterName:       clusterName,
		ClusterInformation: map[string]cluster.ClusterInformation{
			clusterName: {
				Enabled:                true,
				InitialFailoverVersion: 1,
				RPCAddress:             frontendAddr,
				HTTPAddress:            net.JoinHostPort(advertise, strconv.Itoa(p.frontendHTTP)),
				// ClusterID left empty: the server generates one on first
				// start and keeps the stored one afterwards.
			},
		},
	}
	c.DCRedirectionPolicy.Policy = "noop"
	c.Services = map[string]config.Service{
		string(primitives.FrontendService): svc(p.frontend, p.frontendHTTP),
		string(primitives.HistoryService):  svc(p.history, 0),
		string(primitives.MatchingService): svc(p.matching, 0),
		string(primitives.WorkerService):   svc(p.worker, 0),
	}
	c.Archival.History.State = "disabled"
	c.Archival.Visibility.State = "disabled"
	c.NamespaceDefaults.Archival.History.State = "disabled"
	c.NamespaceDefaults.Archival.Visibility.State = "disabled"
	// The worker service (system workflows: schedules, batch operations)
	// reaches the frontend through this address.
	c.PublicClient.HostPort = frontendAddr
	return &c
}

// staticHosts tells each service where the others listen, replacing ringpop.
func staticHosts(advertise string, p ports) map[primitives.ServiceName]static.Hosts {
	addr := func(port int) static.Hosts {
		return static.SingleLocalHost(net.JoinHostPort(advertise, strconv.Itoa(port)))
	}
	return map[primitives.ServiceName]static.Hosts{
		primitives.FrontendService: addr(p.frontend),
		primitives.HistoryService:  addr(p.history),
		primitives.MatchingService: addr(p.matching),
		primitives.WorkerService:   addr(p.worker),
	}
}

// advertiseHost is the address clients and the services themselves use to
// reach a stack bound to host: host itself, except for the wildcard
// addresses (0.0.0.0, ::), which accept connections but are not a
// destination; loopback is used for those.
func advertiseHost(host string) string {
	ip := net.ParseIP(host)
	switch {
	case ip == nil || !ip.IsUnspecified():
		return host
	case ip.To4() != nil:
		return "127.0.0.1"
	default:
		return "::1"
	}
}
