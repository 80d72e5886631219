package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	workercmd "github.com/retrain-ml/retrain/cmd/retrain-worker/command"
	retraincmd "github.com/retrain-ml/retrain/cmd/retrain/command"
	"github.com/retrain-ml/retrain/internal/cli"
)

// binDir holds the binaries built from this tree for the test process
// (set by runTests; removed with the stack's folder).
var binDir string

// programEnv names the program this test binary runs as (retrain,
// retrain-worker) in a process a test started as one of them; processes
// that program starts again (the dev stack's S3 server, say) inherit it.
const programEnv = "RETRAIN_IT_PROGRAM"

// programs are the commands of this tree that the test binary can run as,
// instead of linking them again: linking each took 20-90 s of a 2-core
// machine's time in every run of this package.
var programs = map[string]func() *cobra.Command{
	"retrain":        retraincmd.NewRoot,
	"retrain-worker": workercmd.NewRoot,
}

// runAsProgram runs the program this process was started as, if any (by
// the name it was started under, or by programEnv), and reports whether it
// did. The program's exit status ends the process.
func runAsProgram() bool {
	name := os.Getenv(programEnv)
	if programs[name] == nil {
		name = filepath.Base(os.Args[0])
	}
	newRoot := programs[name]
	if newRoot == nil {
		return false
	}
	if err := os.Setenv(programEnv, name); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cli.Execute(newRoot())
	return true
}

// treeBinary returns the program of pkg (./cmd/retrain or
// ./cmd/retrain-worker) of this tree: a link named after it to this test
// binary, which runs it (runAsProgram).
func treeBinary(t *testing.T, pkg string) string {
	t.Helper()
	name := filepath.Base(pkg)
	if programs[name] == nil {
		t.Fatalf("no program %s in this test binary", pkg)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(binDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, name)
	// Tests in parallel ask for it at once: the first link stands.
	if err := os.Symlink(self, bin); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
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
