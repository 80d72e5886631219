package s3test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/retrain-ml/retrain/internal/devkit/gatewayproc"
)

// Server is a running S3 gateway process.
type Server struct {
	Endpoint  string // http://127.0.0.1:PORT
	Region    string
	AccessKey string // root credentials, random for each server
	SecretKey string
	Bucket    string // a bucket created by Start, empty
	// Root is the POSIX backend's root directory: bucket b's object k is
	// the file Root/b/k. Tests may inspect or damage it.
	Root string

	cmd  *exec.Cmd
	life *os.File // the write end of the gateway's standard input
	out  *gatewayproc.HeadBuffer
	done chan struct{} // closed when the process has exited
}

const (
	startTimeout = 30 * time.Second
	// outputLimit bounds the server output kept for failure messages.
	outputLimit = 1 << 20
)

// Start runs a fresh S3 server (versitygw, as the dev stack runs it) with
// an empty bucket and stops it when the test ends. It fails the test if the server cannot be started.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := binary()
	if err != nil {
		t.Fatalf("s3test: no S3 gateway: %v", err)
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "data")
	cfg := gatewayproc.ChildConfig{Root: root, Versions: filepath.Join(dir, "versions")}
	for _, d := range []string{root, cfg.Versions} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("s3test: %v", err)
		}
	}
	// The POSIX backend keeps ETags, checksums and content types in
	// user extended attributes. Where the file system has none (tmpfs on old
	// kernels, some overlay setups) it can keep them in a sidecar tree.
	xattrErr := gatewayproc.ProbeXattr(root)
	if errors.Is(xattrErr, gatewayproc.ErrXattrNotProbed) {
		// Assume support where it cannot be checked; versitygw reports
		// the problem itself if that is wrong.
		xattrErr = nil
	}
	if os.Getenv("S3TEST_METADATA") == "sidecar" {
		xattrErr = errors.New("S3TEST_METADATA=sidecar")
	}
	if xattrErr != nil {
		t.Logf("s3test: not using extended attributes in %s (%v); versitygw keeps metadata in a sidecar directory", root, xattrErr)
		cfg.Sidecar = filepath.Join(dir, "sidecar")
		if err := os.MkdirAll(cfg.Sidecar, 0o755); err != nil {
			t.Fatalf("s3test: %v", err)
		}
	}

	s := &Server{
		Region:    "us-east-1",
		AccessKey: "s3test" + gatewayproc.RandomHex(8),
		SecretKey: gatewayproc.RandomHex(20),
		Bucket:    "retrain-test",
		Root:      root,
	}
	// The port is chosen by letting the kernel pick one and releasing it;
	// another process can grab it in between, so try a few times.
	cfg.Access, cfg.Secret = s.AccessKey, s.SecretKey
	var lastErr error
	for range 3 {
		if lastErr = s.start(bin, cfg); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		t.Fatalf("s3test: cannot start the S3 gateway (%s): %v", bin, lastErr)
	}
	t.Cleanup(s.stop)

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if _, err := s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(s.Bucket)}); err != nil {
		t.Fatalf("s3test: create bucket %q: %v\ngateway output:\n%s", s.Bucket, err, s.out)
	}
	return s
}

func (s *Server) start(bin string, cfg gatewayproc.ChildConfig) error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	cfg.Addr = addr
	s.Endpoint = "http://" + addr
	s.out = gatewayproc.NewHeadBuffer(outputLimit)
	s.done = make(chan struct{})
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	// The gateway serves until its standard input closes: this process
	// holds the pipe's other end until stop, and the kernel closes it if
	// this process dies without stopping it.
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer lifeR.Close()
	cmd := exec.Command(bin)
	cmd.Env = append(gatewayproc.Environ(), gatewayproc.ChildEnv+"="+string(b))
	cmd.Stdin = lifeR
	cmd.Stdout = s.out
	cmd.Stderr = s.out
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		lifeW.Close()
		return err
	}
	s.cmd, s.life = cmd, lifeW
	go func() {
		cmd.Wait()
		close(s.done)
	}()

	deadline := time.Now().Add(startTimeout)
	client := &http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return fmt.Errorf("the S3 gateway exited: %v\noutput:\n%s", cmd.ProcessState, s.out)
		default:
		}
		resp, err := client.Get(s.Endpoint + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.stop()
	return fmt.Errorf("the S3 gateway is not healthy at %s/health after %v\noutput:\n%s", s.Endpoint, startTimeout, s.out)
}

func (s *Server) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Kill()
	s.life.Close()
	<-s.done
}

// Client returns an SDK client with the server's root credentials, for
// checking what a test wrote without going through the code under test.
func (s *Server) Client() *s3.Client {
	return s3.New(s3.Options{
		BaseEndpoint: aws.String(s.Endpoint),
		Region:       s.Region,
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
	})
}

// URI returns s3://<Bucket>/<prefix>.
func (s *Server) URI(prefix string) string {
	return strings.TrimSuffix("s3://"+s.Bucket+"/"+prefix, "/")
}

// Keys lists every key in the bucket, for asserting what was written.
func (s *Server) Keys(t testing.TB) []string {
	t.Helper()
	var keys []string
	p := s3.NewListObjectsV2Paginator(s.Client(), &s3.ListObjectsV2Input{Bucket: aws.String(s.Bucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatalf("s3test: list %s: %v", s.Bucket, err)
		}
		for _, o := range page.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	return keys
}

// Output returns what the server printed so far.
func (s *Server) Output() string { return s.out.String() }

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// errNoXattr is wrapped by the probe's error where the temporary directory
// has no user extended attributes.
var errNoXattr = gatewayproc.ErrNoXattr
