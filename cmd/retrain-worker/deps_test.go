package main

import (
	"os/exec"
	"slices"
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
		"github.com/retrain-ml/retrain/internal/devkit/devstack",
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if strings.HasPrefix(pkg, f) {
				t.Errorf("retrain-worker depends on %s", pkg)
			}
		}
	}
}

// TestWorkerLinksNVML: GPU hosts run retrain-worker (deploy/k8s/
// worker-gpu.yaml), so it is the binary that always carries the NVML
// backend; the retrain CLI does not (cmd/retrain's TestNoNVMLByDefault).
func TestWorkerLinksNVML(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, want := range []string{"github.com/NVIDIA/go-nvml/pkg/nvml", "github.com/retrain-ml/retrain/gpu/nvmlhost"} {
		if !slices.Contains(strings.Fields(string(out)), want) {
			t.Errorf("retrain-worker does not link %s", want)
		}
	}
}
