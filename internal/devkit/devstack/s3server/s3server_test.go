package s3server

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/internal/storage"
)

func TestMain(m *testing.M) {
	Main() // the server child, when this binary is started as one
	os.Exit(m.Run())
}

func start(t *testing.T, dataDir string) *Server {
	t.Helper()
	s, err := Start(t.Context(), Options{DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	return s
}

// TestObjectsArePlainFiles writes through the data dir's connection file,
// as `retrain model --data-dir` does, and finds the object on disk.
func TestObjectsArePlainFiles(t *testing.T) {
	data := t.TempDir()
	s := start(t, data)
	ctx := t.Context()
	st, err := storage.Open(ctx, storage.Config{DataDir: data}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutBytes(ctx, "models/m/hello.txt", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(s.Root(), s.Bucket(), "models", "m", "hello.txt"))
	if err != nil || string(got) != "hello" {
		t.Fatalf("object on disk = %q, %v", got, err)
	}
	// Conditional writes are what the registry and checkpoints rely on.
	if _, err := st.PutIfAbsent(ctx, "models/m/hello.txt", strings.NewReader("again")); !errors.Is(err, s3store.ErrExists) {
		t.Fatalf("PutIfAbsent on an existing key: %v, want ErrExists", err)
	}
	info, err := storage.ReadDevConnection(data)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(storage.DevConnectionPath(data))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("connection file mode %v, %v; want 0600: it holds credentials", fi.Mode().Perm(), err)
	}
	if info.Endpoint != s.Endpoint() || info.URI != "s3://"+DefaultBucket {
		t.Fatalf("connection %+v", info)
	}
}

// TestRestartKeepsDataAndCredentials stops and starts a server on one data
// dir: objects and credentials survive, so a worker configured from the
// first run keeps working.
func TestRestartKeepsDataAndCredentials(t *testing.T) {
	data := t.TempDir()
	s := start(t, data)
	cfg := s.StoreConfig("p")
	ctx := t.Context()
	st, err := s3store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutBytes(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := s3store.Open(ctx, withTimeout(cfg)); err == nil {
		t.Fatal("store still reachable after Stop")
	}

	// Same port, so the old configuration is the new one.
	port := cfg.Endpoint[strings.LastIndexByte(cfg.Endpoint, ':')+1:]
	s2, err := Start(ctx, Options{DataDir: data, Port: atoi(t, port)})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Stop()
	st, err = s3store.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("old configuration after restart: %v", err)
	}
	if b, _, err := st.GetBytes(ctx, "k"); err != nil || string(b) != "v" {
		t.Fatalf("object after restart = %q, %v", b, err)
	}
}

// TestChildExitsWithParent closes the pipe a killed parent would leave
// closed: the server must not outlive the dev stack.
func TestChildExitsWithParent(t *testing.T) {
	s := start(t, t.TempDir())
	s.life.Close()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatal("server still running 10s after its parent's pipe closed")
	}
}

func TestPortInUse(t *testing.T) {
	s := start(t, t.TempDir())
	port := s.Endpoint()[strings.LastIndexByte(s.Endpoint(), ':')+1:]
	_, err := Start(t.Context(), Options{DataDir: t.TempDir(), Port: atoi(t, port)})
	if err == nil || !strings.Contains(err.Error(), "cannot listen") {
		t.Fatalf("second server on port %s: %v", port, err)
	}
}

func withTimeout(c s3store.Config) s3store.Config {
	c.OpenTimeout = 2 * time.Second
	return c
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
