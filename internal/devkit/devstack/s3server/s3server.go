// Package s3server runs the dev stack's S3 server: versitygw (Apache-2.0)
// with its POSIX backend, so objects are plain files under the data dir,
// where users can see what a pipeline wrote:
//
//	DATA/s3/data/BUCKET/KEY    the objects
//	DATA/s3/versions/          older object versions (versitygw's versioning dir)
//	DATA/s3/meta/              object metadata, where the file system has no
//	                           extended attributes to hold it
//	DATA/s3/connection.json    endpoint and credentials (mode 0600), for
//	                           `retrain model --data-dir DATA` and workers
//
// # A child process
//
// The gateway is linked into the calling binary (package embedgw) but runs in
// a child process, the binary started again: versitygw's POSIX backend
// resolves object paths against the process's working directory, which it
// changes to its root, and that would move the working directory of the
// whole dev stack, including the commands its worker runs. A binary that
// calls [Start] must therefore call [Main] first thing in main, which turns
// the child into the server. The child exits when the parent does, even on
// SIGKILL: it watches a pipe only the parent holds open.
//
// Only cmd/retrain and tests may import this package: it links versitygw,
// which the production worker must not carry.
package s3server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/versity/versitygw/backend/meta"
	"github.com/versity/versitygw/backend/posix"
	"github.com/versity/versitygw/embedgw"

	"github.com/retrain-ml/retrain/internal/devkit/gatewayproc"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/internal/storage"
)

// DefaultBucket is the bucket the dev stack keeps checkpoints and models in.
const DefaultBucket = "retrain"

const (
	region       = "us-east-1"
	healthPath   = "/health"
	startTimeout = 30 * time.Second
	stopTimeout  = 10 * time.Second
	// outputLimit bounds the child's output kept for error messages.
	outputLimit = 64 << 10
)

// Options configures a server. The zero value plus DataDir is a working
// server on a free loopback port.
type Options struct {
	// DataDir is the dev stack's data dir; the server's state is DataDir/s3.
	DataDir string
	// Host to listen on; default 127.0.0.1.
	Host string
	// Port to listen on; 0 picks a free one.
	Port int
	// Bucket is created if missing; default DefaultBucket.
	Bucket string
	// Logger receives the server's own output at debug level.
	Logger *slog.Logger
}

// Server is a running S3 server.
type Server struct {
	endpoint string
	bucket   string
	dir      string
	keys     keys
	log      *slog.Logger

	cmd  *exec.Cmd
	life *os.File // write end of the pipe the child watches
	out  *gatewayproc.HeadBuffer
	done chan struct{} // closed when the child has exited

	stopOnce sync.Once
	stopErr  error
}

// keys are the server's root credentials. They are made once per data dir
// and kept in the connection file, so that a worker that read them keeps
// working across restarts of the dev stack.
type keys struct {
	Access string
	Secret string
}

// childConfig is what the parent tells the child, through
// gatewayproc.ChildEnv.
type childConfig = gatewayproc.ChildConfig

// Start runs the server in a child process (the current executable, which
// must call [Main]), waits until it is healthy, creates the bucket and
// records the connection under the data dir.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.DataDir == "" {
		return nil, errors.New("s3server: no data dir")
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.Bucket == "" {
		opts.Bucket = DefaultBucket
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	dataDir, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return nil, fmt.Errorf("s3server: data dir: %w", err)
	}
	dir := filepath.Join(dataDir, "s3")
	cfg := childConfig{Root: filepath.Join(dir, "data"), Versions: filepath.Join(dir, "versions")}
	for _, d := range []string{cfg.Root, cfg.Versions} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("s3server: %w", err)
		}
	}
	// versitygw keeps ETags and checksums in extended attributes; where
	// the file system has none (tmpfs on old kernels, some overlays) it
	// can keep them in a sidecar tree instead.
	if err := gatewayproc.ProbeXattr(cfg.Root); err != nil {
		cfg.Sidecar = filepath.Join(dir, "meta")
		if err := os.MkdirAll(cfg.Sidecar, 0o755); err != nil {
			return nil, fmt.Errorf("s3server: %w", err)
		}
		opts.Logger.Debug("s3server: no extended attributes, keeping metadata in a sidecar directory", "dir", cfg.Sidecar, "reason", err)
	}
	k, err := loadKeys(dataDir)
	if err != nil {
		return nil, err
	}
	cfg.Access, cfg.Secret = k.Access, k.Secret
	if cfg.Addr, err = listenAddr(opts.Host, opts.Port); err != nil {
		return nil, err
	}

	s := &Server{
		endpoint: "http://" + cfg.Addr, bucket: opts.Bucket, dir: dir, keys: k, log: opts.Logger,
		out: gatewayproc.NewHeadBuffer(outputLimit), done: make(chan struct{}),
	}
	if err := s.spawn(cfg); err != nil {
		return nil, err
	}
	if err := s.waitHealthy(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	if err := s.createBucket(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	if err := storage.WriteDevConnection(dataDir, s.StoreConfig("")); err != nil {
		s.Stop()
		return nil, err
	}
	s.log.Debug("s3server: ready", "endpoint", s.endpoint, "bucket", s.bucket, "root", cfg.Root)
	return s, nil
}

// loadKeys reuses the credentials of an earlier run on the data dir, or
// makes new ones.
func loadKeys(dataDir string) (keys, error) {
	if c, err := storage.ReadDevConnection(dataDir); err == nil && c.AccessKeyID != "" && c.SecretAccessKey != "" {
		return keys{Access: c.AccessKeyID, Secret: c.SecretAccessKey}, nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return keys{}, err
	}
	return keys{Access: "retrain" + gatewayproc.RandomHex(6), Secret: gatewayproc.RandomHex(20)}, nil
}

// listenAddr checks that host:port is free, or picks a free port.
func listenAddr(host string, port int) (string, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return "", fmt.Errorf("s3server: cannot listen on %s: %w", net.JoinHostPort(host, strconv.Itoa(port)), err)
	}
	addr := l.Addr().String()
	// The child binds it again; another process could take a picked port
	// in between, which fails the start with a clear message.
	l.Close()
	return addr, nil
}

func (s *Server) spawn(cfg childConfig) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("s3server: cannot find this program to start the server: %w", err)
	}
	b, _ := json.Marshal(cfg)
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("s3server: %w", err)
	}
	defer lifeR.Close()
	// A test binary started again runs no tests: only its TestMain, which
	// calls Main.
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(gatewayproc.Environ(), gatewayproc.ChildEnv+"="+string(b))
	cmd.Stdin = lifeR
	cmd.Stdout, cmd.Stderr = s.out, s.out
	detach(cmd)
	if err := cmd.Start(); err != nil {
		lifeW.Close()
		return fmt.Errorf("s3server: start %s: %w", exe, err)
	}
	s.cmd, s.life = cmd, lifeW
	go func() {
		cmd.Wait()
		close(s.done)
	}()
	return nil
}

func (s *Server) waitHealthy(ctx context.Context) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return fmt.Errorf("s3server: server exited during start (%v): %s", s.cmd.ProcessState, s.out)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		resp, err := client.Get(s.endpoint + healthPath)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("s3server: not healthy at %s after %v: %s", s.endpoint, startTimeout, s.out)
}

func (s *Server) createBucket(ctx context.Context) error {
	client := s3.New(s3.Options{
		BaseEndpoint: aws.String(s.endpoint),
		Region:       region,
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.keys.Access, s.keys.Secret, ""),
	})
	_, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(s.bucket)})
	if ae, ok := errors.AsType[smithy.APIError](err); ok && (ae.ErrorCode() == "BucketAlreadyOwnedByYou" || ae.ErrorCode() == "BucketAlreadyExists") {
		return nil
	}
	if err != nil {
		return fmt.Errorf("s3server: create bucket %s: %v", s.bucket, err)
	}
	return nil
}

// Endpoint returns the server's base URL, http://host:port.
func (s *Server) Endpoint() string { return s.endpoint }

// Bucket returns the bucket Start created.
func (s *Server) Bucket() string { return s.bucket }

// Root returns the folder holding the buckets: object KEY of the bucket is
// the file Root()/Bucket()/KEY.
func (s *Server) Root() string { return filepath.Join(s.dir, "data") }

// StoreConfig returns the configuration of a Store on s3://bucket/prefix of
// this server, credentials included.
func (s *Server) StoreConfig(prefix string) s3store.Config {
	return s3store.Config{
		URI:             s3store.URI{Bucket: s.bucket}.Join(prefix).String(),
		Endpoint:        s.endpoint,
		Region:          region,
		UsePathStyle:    true,
		AccessKeyID:     s.keys.Access,
		SecretAccessKey: s.keys.Secret,
	}
}

// Stop stops the server and waits for it to exit.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		if s.cmd == nil {
			return
		}
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(stopTimeout):
			s.cmd.Process.Kill()
			<-s.done
			s.stopErr = fmt.Errorf("s3server: did not stop within %v; killed", stopTimeout)
		}
		s.life.Close()
		s.log.Debug("s3server: stopped", "output", s.out.String())
	})
	return s.stopErr
}

// Main serves S3 and exits if this process is a server child started by
// [Start] (or by internal/devkit/s3test, whose gateway program is Main and
// nothing else); otherwise it returns at once. Binaries that call Start
// (and TestMain of tests that do) call it before anything else.
func Main() {
	raw, ok := os.LookupEnv(gatewayproc.ChildEnv)
	if !ok {
		return
	}
	if err := serve(raw); err != nil {
		fmt.Fprintln(os.Stderr, "s3server:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func serve(raw string) error {
	var cfg childConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		return fmt.Errorf("bad configuration: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// The parent holds the other end of stdin: EOF means it is gone, even
	// if it was killed and could not stop us.
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()

	var ms meta.MetadataStorer = meta.XattrMeta{}
	opts := posix.PosixOpts{VersioningDir: cfg.Versions, Concurrency: 5000}
	if cfg.Sidecar != "" {
		sc, err := meta.NewSideCar(cfg.Sidecar)
		if err != nil {
			return fmt.Errorf("sidecar metadata: %w", err)
		}
		ms, opts.SideCarDir = sc, cfg.Sidecar
	}
	be, err := posix.New(cfg.Root, ms, opts)
	if err != nil {
		return fmt.Errorf("posix backend: %w", err)
	}
	err = embedgw.RunVersityGW(ctx, be, &embedgw.Config{
		RootUserAccess:    cfg.Access,
		RootUserSecret:    cfg.Secret,
		Region:            region,
		Ports:             []string{cfg.Addr},
		MaxConnections:    250000,
		MaxRequests:       100000,
		MultipartMaxParts: 10000,
		HealthPath:        healthPath,
		Quiet:             true,
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
