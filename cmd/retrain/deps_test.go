package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// deps lists the packages `go build` links into this command with tags.
func deps(t *testing.T, tags string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-tags", tags, "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -tags %q: %v\n%s", tags, err, out)
	}
	return strings.Fields(string(out))
}

// TestNoNVMLByDefault: `go run ./cmd/retrain demo` must not compile
// go-nvml, whose cgo code makes a cold build print ~150 C compiler
// warnings; `-tags nvml` brings NVML back for `retrain gpus` and
// `retrain worker --gpu`.
func TestNoNVMLByDefault(t *testing.T) {
	const nvml = "github.com/NVIDIA/go-nvml/"
	for _, p := range deps(t, "") {
		if strings.HasPrefix(p, nvml) || p == "github.com/retrain-ml/retrain/gpu/nvmlhost" {
			t.Errorf("retrain links %s without -tags nvml", p)
		}
	}
	if !slices.Contains(deps(t, "nvml"), nvml+"pkg/nvml") {
		t.Errorf("retrain built with -tags nvml does not link %spkg/nvml", nvml)
	}
}
