package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestWorkerCarriesNoDevStack keeps the production worker slim: it must not
// link the embedded Temporal server, the Web UI or the embedded S3 server.
func TestWorkerCarriesNoDevStack(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	forbidden := []string{
		"go.temporal.io/server/",
		"github.com/temporalio/ui-server/",
		"github.com/versity/versitygw/",
		"github.com/retrain-ml/retrain/internal/devstack",
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if strings.HasPrefix(pkg, f) {
				t.Errorf("retrain-worker depends on %s", pkg)
			}
		}
	}
}
