//go:build cgo

package nvmlhost

import (
	"bytes"
	"errors"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/retrain-ml/retrain/gpu"
)

// TestOpenRealLibrary opens the host's real libnvidia-ml. Without a driver
// (this project's CI) it must fail with ErrNoDriver and call nothing else:
// a stray call would end this test binary with exit 127, not fail a test.
// With a driver it reads a real inventory.
func TestOpenRealLibrary(t *testing.T) {
	h, err := Open()
	if err != nil {
		if !errors.Is(err, gpu.ErrNoDriver) {
			t.Fatalf("Open: %v", err)
		}
		if !errors.Is(err, nvml.ERROR_LIBRARY_NOT_FOUND) && !errors.Is(err, nvml.ERROR_DRIVER_NOT_LOADED) {
			t.Errorf("ErrNoDriver without NVML's reason: %v", err)
		}
		if h != nil {
			t.Fatal("a Host after a failed Init")
		}
		t.Logf("no driver: %v", err)
		return
	}
	defer func() {
		if err := h.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	inv, err := h.Inventory()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := gpu.Format(&buf, inv); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", buf.String())
}
