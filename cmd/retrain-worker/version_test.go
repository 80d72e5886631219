package main

import (
	"bytes"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/cmd/retrain-worker/command"
	"github.com/retrain-ml/retrain/internal/version"
)

// TestVersion: `retrain-worker --version` prints the release, the Go
// toolchain and the versions of the Temporal SDK and iceberg-go that
// go.mod pins, and says that it does not link the Temporal server.
func TestVersion(t *testing.T) {
	var out bytes.Buffer
	root := command.NewRoot()
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"--version"})
	if err := root.Execute(); err != nil {
		t.Fatalf("retrain-worker --version: %v\n%s", err, out.String())
	}
	got := out.String()
	want := "retrain-worker " + version.Version + "\n" +
		"  go:              " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n" +
		"  temporal sdk:    " + required(t, "go.temporal.io/sdk") + "\n" +
		"  temporal server: not linked\n" +
		"  iceberg-go:      " + required(t, "github.com/apache/iceberg-go") + "\n"
	if got != want {
		t.Errorf("retrain-worker --version:\n%s\nwant:\n%s", got, want)
	}
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
