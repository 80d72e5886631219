package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/server/temporal"
)

// Options configures a stack. The zero value plus DataDir is a working stack
// on 127.0.0.1 with free ports.
type Options struct {
	// DataDir holds the SQLite file (DataDir/temporal.db, plus its -wal and
	// -shm files while open) and a lock file. Created if missing. Workflow
	// state survives restarts of the stack on the same dir.
	DataDir string
	// Host is the IP (or a name resolving to one, like "localhost") every
	// service binds to. Default "127.0.0.1". With a wildcard address
	// ("0.0.0.0", "::") the stack listens on all interfaces and advertises
	// loopback in FrontendAddress and UIAddress.
	Host string
	// Port is the frontend gRPC port (what client.Dial needs). 0 picks a
	// free port, for tests; `retrain dev` passes 7233.
	Port int
	// HTTPPort is the frontend's HTTP API port (Temporal's JSON API, for
	// clients without an SDK: curl, Python's standard library); 0 picks a
	// free port, for tests; `retrain dev` passes 7243, as Temporal's own
	// dev server does.
	HTTPPort int
	// UIPort is the Web UI's HTTP port; 0 picks a free port. Ignored when
	// Headless.
	UIPort int
	// Headless runs without the Web UI.
	Headless bool
	// Namespace is created if missing (retention 7 days). Default "default".
	Namespace string
	// SearchAttributes are registered in Namespace if missing, e.g.
	// {"RetrainPipeline": KEYWORD}. A name already registered with another
	// type makes Start fail.
	SearchAttributes map[string]enumspb.IndexedValueType
	// Logger receives the server's logs (attribute component=temporal).
	// nil means slog.Default().
	Logger *slog.Logger
	// LogLevel is the lowest level of server logs passed to Logger. The zero
	// value (which is slog.LevelInfo) means the default, slog.LevelWarn: the
	// server logs a lot at Info. For Info and above pass slog.LevelInfo-1;
	// slog.LevelDebug passes everything.
	LogLevel slog.Level
	// DynamicConfig overrides server dynamic config on top of the stack's
	// speed tuning, keyed as in the server's dynamic config YAML (e.g.
	// "history.transferProcessorMaxPollRPS": 20 restores a stock setting).
	DynamicConfig map[string]any
}

// Server is a running stack. Stop it to free its ports and data dir.
type Server struct {
	namespace    string
	frontendAddr string
	httpURL      string
	dbPath       string
	logger       *slog.Logger

	temporal temporal.Server
	ui       *webUI // nil when headless
	lock     *dirLock

	// transient demotes server logs to Debug while starting and stopping
	// (see serverLogger).
	transient atomic.Bool

	stopOnce sync.Once
	stopErr  error
}

const (
	defaultHost      = "127.0.0.1"
	defaultNamespace = "default"
	lockFileName     = "devstack.lock"
	// startTimeout bounds Start when ctx has no earlier deadline. A cold
	// start takes about a second; the slack covers slow CI machines.
	startTimeout = 2 * time.Minute
	// stopTimeout bounds Stop; the server's own per-service limit is minutes.
	stopTimeout = 30 * time.Second
)

// errLocked reports a data dir already used by a running stack.
var errLocked = errors.New("data dir is in use by another running dev stack")

// Start starts the stack and returns once the frontend accepts calls, the
// namespace and search attributes exist, and (unless headless) the Web UI
// answers.
func Start(ctx context.Context, opts Options) (_ *Server, err error) {
	opts, err = opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("devstack: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()

	s := &Server{namespace: opts.Namespace, logger: opts.Logger}
	s.transient.Store(true)
	defer func() {
		if err != nil {
			_ = s.Stop()
			err = fmt.Errorf("devstack: %w", err)
		}
	}()

	// Data dir, lock, schema, namespace: all before the server starts, so
	// every service finds the namespace in its registry at startup.
	if err := os.MkdirAll(opts.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	if s.lock, err = lockDir(filepath.Join(opts.DataDir, lockFileName)); err != nil {
		if errors.Is(err, errLocked) {
			return nil, err
		}
		return nil, fmt.Errorf("data dir %s is not writable: %w", opts.DataDir, err)
	}
	s.dbPath = filepath.Join(opts.DataDir, dbFileName)
	if err := validateDBPath(s.dbPath); err != nil {
		return nil, err
	}
	created, err := ensureSchema(ctx, s.dbPath)
	if err != nil {
		return nil, err
	}
	sqlCfg := sqliteConfig(s.dbPath)
	if err := precreateNamespace(sqlCfg, opts.Namespace, opts.SearchAttributes); err != nil {
		return nil, err
	}

	p, err := allocatePorts(opts.Host, opts.Port, opts.HTTPPort, opts.UIPort, opts.Headless)
	if err != nil {
		return nil, err
	}
	advertise := advertiseHost(opts.Host)
	s.frontendAddr = net.JoinHostPort(advertise, strconv.Itoa(p.frontend))
	s.httpURL = "http://" + net.JoinHostPort(advertise, strconv.Itoa(p.frontendHTTP))

	logger := newServerLogger(opts.Logger, opts.LogLevel, &s.transient)
	if err := recoverServerPanic(func() error {
		s.temporal, err = temporal.NewServer(
			temporal.ForServices(temporal.DefaultServices),
			temporal.WithConfig(serverConfig(opts.Host, advertise, p, sqlCfg)),
			temporal.WithStaticHosts(staticHosts(advertise, p)),
			temporal.WithDynamicConfigClient(tunedDynamicConfig(opts.DynamicConfig)),
			temporal.WithLogger(logger),
			temporal.WithNamespaceLogger(logger),
		)
		return err
	}); err != nil {
		return nil, fmt.Errorf("build Temporal server: %w", err)
	}
	if err := recoverServerPanic(s.temporal.Start); err != nil {
		return nil, fmt.Errorf("start Temporal server: %w", err)
	}

	if err := checkPragmas(sqlCfg, expectedPragmas); err != nil {
		return nil, err
	}

	c, err := client.DialContext(ctx, client.Options{
		HostPort:  s.frontendAddr,
		Namespace: opts.Namespace,
		Logger:    sdklog.NewStructuredLogger(logger.slog),
	})
	if err != nil {
		return nil, fmt.Errorf("connect to frontend %s: %w", s.frontendAddr, err)
	}
	defer c.Close()
	if err := waitForNamespace(ctx, c, opts.Namespace); err != nil {
		return nil, err
	}
	if err := ensureSearchAttributes(ctx, c, opts.Namespace, opts.SearchAttributes, namespaceRefreshInterval); err != nil {
		return nil, err
	}

	if !opts.Headless {
		if s.ui, err = startUI(ctx, opts.Host, advertise, p.ui, s.frontendAddr, opts.Namespace); err != nil {
			return nil, err
		}
	}
	s.transient.Store(false)
	opts.Logger.Debug("dev stack started",
		"frontend", s.frontendAddr, "ui", s.UIAddress(), "db", s.dbPath, "newDB", created)
	return s, nil
}

func (o Options) withDefaults() (Options, error) {
	if o.DataDir == "" {
		return o, errors.New("no data dir: Options.DataDir is empty")
	}
	dir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return o, fmt.Errorf("data dir %q: %w", o.DataDir, err)
	}
	o.DataDir = dir
	if o.Host == "" {
		o.Host = defaultHost
	}
	if o.Host, err = resolveHost(o.Host); err != nil {
		return o, err
	}
	if o.Port < 0 || o.Port > 65535 || o.UIPort < 0 || o.UIPort > 65535 {
		return o, fmt.Errorf("invalid port (frontend %d, UI %d)", o.Port, o.UIPort)
	}
	if o.Namespace == "" {
		o.Namespace = defaultNamespace
	}
	if err := validateSearchAttributes(o.SearchAttributes); err != nil {
		return o, err
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.LogLevel == 0 {
		o.LogLevel = slog.LevelWarn
	}
	return o, nil
}

// resolveHost returns host as an IP literal: the server's bindOnIP accepts
// nothing else.
func resolveHost(host string) (string, error) {
	if ip := net.ParseIP(host); ip != nil {
		return ip.String(), nil
	}
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		return "", fmt.Errorf("host %q is not an IP address and does not resolve: %v", host, err)
	}
	for _, ip := range ips {
		if ip.To4() != nil { // prefer IPv4 for "localhost"
			return ip.String(), nil
		}
	}
	return ips[0].String(), nil
}

// recoverServerPanic turns a panic inside f into an error: the server
// reports unrecoverable setup problems (a port it cannot bind, a bad config)
// through Fatal, which our logger turns into a panic (see serverLogger).
func recoverServerPanic(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	return f()
}

// FrontendAddress is the frontend's host:port, for client.Dial.
func (s *Server) FrontendAddress() string { return s.frontendAddr }

// HTTPAddress is the frontend's HTTP API base URL ("http://host:port"):
// POST {HTTPAddress}/api/v1/namespaces/NS/workflows/ID starts a workflow.
func (s *Server) HTTPAddress() string { return s.httpURL }

// UIAddress is the Web UI's base URL ("http://host:port"), or "" when
// headless.
func (s *Server) UIAddress() string {
	if s.ui == nil {
		return ""
	}
	return s.ui.url()
}

// Namespace is the namespace Start ensured.
func (s *Server) Namespace() string { return s.namespace }

// DatabasePath is the SQLite file holding all of the stack's state.
func (s *Server) DatabasePath() string { return s.dbPath }

// Stop shuts down the Web UI and the server, closing all their listeners,
// and releases the data dir. Safe to call more than once; later calls return
// the first call's result.
//
// The SQLite connection itself stays open until the process exits: the
// server's sqlite plugin keeps one connection per file for the life of the
// process, and a later Start on the same dir reuses it.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() { s.stopErr = s.stop() })
	return s.stopErr
}

func (s *Server) stop() error {
	s.transient.Store(true)
	var errs []error
	if s.ui != nil {
		s.ui.stop()
	}
	if s.temporal != nil {
		done := make(chan error, 1)
		go func() { done <- recoverServerPanic(s.temporal.Stop) }()
		select {
		case err := <-done:
			if err != nil {
				errs = append(errs, fmt.Errorf("stop Temporal server: %w", err))
			}
		case <-time.After(stopTimeout):
			errs = append(errs, fmt.Errorf("stop Temporal server: still running after %s", stopTimeout))
		}
	}
	if s.lock != nil {
		if err := s.lock.unlock(); err != nil {
			errs = append(errs, fmt.Errorf("release data dir lock: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("devstack: %w", err)
	}
	return nil
}

func describeNamespaceRequest(namespace string) *workflowservice.DescribeNamespaceRequest {
	return &workflowservice.DescribeNamespaceRequest{Namespace: namespace}
}

func isUnavailable(err error) bool {
	var unavailable *serviceerror.Unavailable
	return errors.As(err, &unavailable)
}
