package main

import (
	"bytes"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/cmd/retrain/command"
	"github.com/retrain-ml/retrain/internal/version"
)

// TestVersion: `retrain --version` prints the release and the versions of
// the Temporal SDK and server and of iceberg-go that go.mod pins, and the
// Go toolchain, and runs nothing else.
func TestVersion(t *testing.T) {
	got := runVersion(t)
	want := []string{
		"retrain " + version.Version + "\n",
		"  go:              " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n",
		"  temporal sdk:    " + required(t, "go.temporal.io/sdk") + "\n",
		"  temporal server: " + required(t, "go.temporal.io/server") + "\n",
		"  iceberg-go:      " + required(t, "github.com/apache/iceberg-go") + "\n",
	}
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("retrain --version lacks %q:\n%s", w, got)
		}
	}
	if !strings.HasPrefix(got, want[0]) {
		t.Errorf("retrain --version does not start with %q:\n%s", want[0], got)
	}
}

func runVersion(t *testing.T) string {
	t.Helper()
	var out bytes.Buffer
	root := command.NewRoot()
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"--version"})
	if err := root.Execute(); err != nil {
		t.Fatalf("retrain --version: %v\n%s", err, out.String())
	}
	return out.String()
}

// required returns the version go.mod requires of module path.
func required(t *testing.T, path string) string {
	t.Helper()
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mod), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == path {
			return f[1]
		}
	}
	t.Fatalf("go.mod does not require %s", path)
	return ""
}
