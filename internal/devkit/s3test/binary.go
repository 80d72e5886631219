package s3test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

const versitygwModule = "github.com/versity/versitygw"

// binary returns the path of a versitygw executable, building it at most
// once per process (and, through the cache and its lock, once per machine).
var binary = sync.OnceValues(findBinary)

func findBinary() (string, error) {
	if p := os.Getenv("VERSITYGW"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("$VERSITYGW: %w", err)
		}
		return p, nil
	}
	mod, err := pinnedModule()
	if err != nil {
		// Without the go tool any versitygw on PATH is the best we have.
		if p, lerr := exec.LookPath("versitygw"); lerr == nil {
			return p, nil
		}
		return "", fmt.Errorf("set $VERSITYGW, put versitygw on PATH, or run tests with the go tool: %w", err)
	}
	if p, err := exec.LookPath("versitygw"); err == nil && reportsVersion(p, mod.Version) {
		return p, nil
	}
	dir, err := toolsDir(mod.Version)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "versitygw")
	if isFile(bin) {
		return bin, nil
	}
	return build(mod, dir, bin)
}

type module struct {
	Path    string
	Version string
	Dir     string
}

// pinnedModule asks the go tool which versitygw this module requires and
// where its source is, downloading it (through GOPROXY) if needed.
func pinnedModule() (module, error) {
	var m module
	out, err := goCmd("", "list", "-m", "-json", versitygwModule)
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(out, &m); err != nil {
		return m, fmt.Errorf("go list -m %s: %w", versitygwModule, err)
	}
	if m.Dir == "" {
		out, err := goCmd("", "mod", "download", "-json", versitygwModule+"@"+m.Version)
		if err != nil {
			return m, err
		}
		if err := json.Unmarshal(out, &m); err != nil {
			return m, fmt.Errorf("go mod download %s: %w", versitygwModule, err)
		}
	}
	return m, nil
}

// toolsDir returns retrain-tools/versitygw-<version> next to the Go build
// cache, so that `go clean -cache` leaves the slow-to-build binary alone and
// every checkout on the machine shares it.
func toolsDir(version string) (string, error) {
	out, err := goCmd("", "env", "GOCACHE")
	if err != nil {
		return "", err
	}
	base := strings.TrimSpace(string(out))
	if base == "" || base == "off" {
		if base, err = os.UserCacheDir(); err != nil {
			return "", err
		}
		base = filepath.Join(base, "go-build")
	}
	dir := filepath.Join(filepath.Dir(base), "retrain-tools", "versitygw-"+version)
	return dir, os.MkdirAll(dir, 0o755)
}

// build compiles versitygw's own main package inside its module directory,
// so that the release's go.sum, not this module's, pins its dependencies.
func build(mod module, dir, bin string) (string, error) {
	unlock, err := lockFile(filepath.Join(dir, "build.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	// Another process may have finished the build while we waited.
	if isFile(bin) {
		return bin, nil
	}
	tmp := fmt.Sprintf("%s.tmp-%d", bin, os.Getpid())
	defer os.Remove(tmp)
	fmt.Fprintf(os.Stderr, "s3test: building versitygw %s into %s (once; takes a few minutes)\n", mod.Version, dir)
	start := time.Now()
	_, err = goCmd(mod.Dir, "build", "-trimpath",
		"-ldflags=-X main.Version="+mod.Version,
		"-o", tmp, "./cmd/versitygw")
	if err != nil {
		return "", fmt.Errorf("build versitygw (or set $VERSITYGW to a versitygw %s binary): %w", mod.Version, err)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", err
	}
	fmt.Fprintf(os.Stderr, "s3test: built versitygw in %v\n", time.Since(start).Round(time.Second))
	return bin, nil
}

func goCmd(dir string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	if dir != "" {
		// Building inside another module: ignore any go.work and this
		// module's flags, and never touch the module's go.mod or go.sum.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return out, nil
}

// reportsVersion reports whether the versitygw at path says it is version.
func reportsVersion(path, version string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(out)) {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == "Version" {
			return strings.TrimPrefix(strings.TrimSpace(v), "v") == strings.TrimPrefix(version, "v")
		}
	}
	return false
}

func isFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}
