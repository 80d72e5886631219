// Package pgtest starts a real PostgreSQL server for tests: one throwaway
// cluster per Start, in its own temporary directory, listening on a free
// loopback port, with trust authentication and durability off (a test's
// database need not survive a power cut).
//
// The binaries come from $PG_BIN, else the newest /usr/lib/postgresql/*/bin
// (Debian's layout), else initdb and postgres on PATH. Where there are none
// the test is skipped with the command that installs them (apt-get install
// postgresql); .ci/run installs them. PostgreSQL refuses to run as root, so
// a test running as root starts it as the user postgres (runuser), which
// Debian's package creates.
package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
)

// InstallHint says how to get the binaries a skipped test wanted.
const InstallHint = "apt-get install postgresql (Debian), or set PG_BIN to a PostgreSQL bin directory"

// Server is a running PostgreSQL cluster.
type Server struct {
	Port int
	Dir  string // the cluster's directory (data/, sock/, postgres.log)
	User string // the superuser tests connect as (no password)
	n    atomic.Int64
}

// Start starts a cluster for the test and stops it when the test ends; it
// skips the test when PostgreSQL is not installed.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := binDir()
	if err != nil {
		t.Skipf("no PostgreSQL server binaries (%v): %s", err, InstallHint)
	}
	var run []string // the prefix that runs a command as the cluster's owner
	owner := ""
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Skipf("running as root and there is no user postgres to run PostgreSQL as (%v): %s", err, InstallHint)
		}
		runuser, err := exec.LookPath("runuser")
		if err != nil {
			t.Skipf("running as root without runuser to start PostgreSQL as postgres: %v", err)
		}
		run, owner = []string{runuser, "-u", "postgres", "--"}, u.Uid+":"+u.Gid
	}
	// Not t.TempDir: its parents are private to this user, and the server
	// may run as another.
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Mkdir(filepath.Join(dir, "sock"), 0o755); err != nil {
		t.Fatal(err)
	}
	if owner != "" {
		uid, gid := splitOwner(owner)
		for _, p := range []string{dir, filepath.Join(dir, "sock")} {
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	s := &Server{Dir: dir, User: "retrain"}
	data := filepath.Join(dir, "data")
	initdb := append(append([]string{}, run...), filepath.Join(bin, "initdb"), "-D", data, "-U", s.User, "-A", "trust", "-E", "UTF8", "--no-sync", "--locale=C")
	if out, err := exec.Command(initdb[0], initdb[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
	logPath := filepath.Join(dir, "postgres.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close() // the server has its own copy
	if owner != "" {
		uid, gid := splitOwner(owner)
		_ = os.Chown(logPath, uid, gid)
	}
	if s.Port, err = freePort(); err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{}, run...), filepath.Join(bin, "postgres"), "-D", data, "-k", filepath.Join(dir, "sock"),
		"-p", strconv.Itoa(s.Port), "-h", "127.0.0.1",
		// A test cluster: nothing to keep across a crash, and many
		// connections (workers' pools, CLIs, the test).
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=200")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: a signal to it reaches the server under runuser.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("pgtest: start postgres: %v", err)
	}
	t.Cleanup(func() {
		// SIGINT: fast shutdown (disconnect clients, no checkpoint wait).
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	if err := s.waitReady(30 * time.Second); err != nil {
		log, _ := os.ReadFile(logPath)
		t.Fatalf("pgtest: %v; server log:\n%s", err, log)
	}
	return s
}

// URI is the connection URI of a database of the cluster.
func (s *Server) URI(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", s.User, s.Port, db)
}

// NewDatabase creates a fresh, empty database and returns its URI.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("test_%d", s.n.Add(1))
	db, err := sql.Open("pgx", s.URI("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(context.Background(), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	return s.URI(name)
}

func (s *Server) waitReady(limit time.Duration) error {
	db, err := sql.Open("pgx", s.URI("postgres"))
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = db.PingContext(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres not ready on port %d after %v: %w", s.Port, limit, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// binDir finds the directory holding initdb and postgres.
func binDir() (string, error) {
	has := func(d string) bool {
		for _, b := range []string{"initdb", "postgres"} {
			if st, err := os.Stat(filepath.Join(d, b)); err != nil || st.IsDir() {
				return false
			}
		}
		return true
	}
	if d := os.Getenv("PG_BIN"); d != "" {
		if !has(d) {
			return "", fmt.Errorf("$PG_BIN=%s holds no initdb and postgres", d)
		}
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	// Newest first: 15 before 9.6 by version number, not by text.
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if has(d) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	return "", errors.New("no initdb and postgres in $PG_BIN, /usr/lib/postgresql/*/bin or PATH")
}

func version(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

func splitOwner(owner string) (int, int) {
	u, g, _ := strings.Cut(owner, ":")
	uid, _ := strconv.Atoi(u)
	gid, _ := strconv.Atoi(g)
	return uid, gid
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
