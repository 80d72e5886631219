package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// binDir holds the binaries built from this tree for the test process
// (set by runTests; removed with the stack's folder).
var binDir string

// treeBins caches this tree's binaries by package: the upgrade and the
// two-worker promotion tests both run retrain-worker, and linking one takes
// 20-90 s on a small machine, so it is built once per test process.
var treeBins = struct {
	sync.Mutex
	path map[string]string
}{path: map[string]string{}}

// treeBinary returns the binary of pkg (e.g. "./cmd/retrain-worker") built
// from this tree, building it on first use.
func treeBinary(t *testing.T, pkg string) string {
	t.Helper()
	treeBins.Lock()
	defer treeBins.Unlock()
	if bin, ok := treeBins.path[pkg]; ok {
		return bin
	}
	dir := filepath.Join(binDir, strings.ReplaceAll(strings.Trim(pkg, "./"), "/", "_"))
	bin, took := goBuild(t, "..", pkg, dir) // the module root
	t.Logf("built %s in %.1fs", pkg, took.Seconds())
	treeBins.path[pkg] = bin
	return bin
}

// goBuild builds pkg of the module at src into dir and says how long that
// took. It shares this machine's module and build caches (no -trimpath:
// that would compile every dependency again).
func goBuild(t *testing.T, src, pkg, dir string) (string, time.Duration) {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("building %s needs the go command: %v", pkg, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, filepath.Base(pkg))
	start := time.Now()
	cmd := exec.Command(goTool, "build", "-o", bin, pkg)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -buildvcs=false"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s in %s: %v\n%s", pkg, src, err, out)
	}
	return bin, time.Since(start)
}
