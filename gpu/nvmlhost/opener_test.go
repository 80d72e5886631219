//go:build cgo

package nvmlhost

import (
	"errors"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/retrain-ml/retrain/gpu"
)

// The Opener hands out a working gpu.Host, and on a failed Init a nil
// interface (not a nil *Host in one, which callers would Close).
func TestOpener(t *testing.T) {
	f := newDGX(t)
	h, err := Opener(WithLibrary(f), WithXIDPollTimeout(2*time.Millisecond))()
	if err != nil {
		t.Fatal(err)
	}
	inv, err := h.Inventory()
	if err != nil || len(inv.Devices) != 8 {
		t.Fatalf("Inventory through the Opener: %d devices, %v", len(inv.Devices), err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Health(); !errors.Is(err, gpu.ErrClosed) {
		t.Fatalf("Health after Close: %v", err)
	}

	bare := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	h, err = Opener(WithLibrary(bare))()
	if h != nil || !errors.Is(err, gpu.ErrNoDriver) {
		t.Fatalf("no driver: %#v, %v; want a nil Host and ErrNoDriver", h, err)
	}
}
