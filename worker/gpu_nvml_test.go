//go:build cgo

package worker

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/retrain-ml/retrain/gpu"
	"github.com/retrain-ml/retrain/gpu/nvmlhost"
	"github.com/retrain-ml/retrain/internal/devkit/nvmlmock"
)

// mockDGX is nvmlmock's DGX H100 with eccErrors uncorrected ECC errors on
// every GPU.
func mockDGX(eccErrors uint64) *server.Server { return nvmlmock.DGX(eccErrors) }

func openMock(lib nvml.Interface) func() (GPUHost, error) {
	return func() (GPUHost, error) {
		h, err := nvmlhost.Open(nvmlhost.WithLibrary(lib), nvmlhost.WithXIDPollTimeout(2*time.Millisecond))
		if err != nil {
			return nil, err
		}
		return h, nil
	}
}

// TestGPUWorkerOnMockedDGX: through NVML (go-nvml's DGX H100 mock) a GPU
// worker gets one slot per healthy GPU, and refuses to start when ECC
// errors exclude every GPU.
func TestGPUWorkerOnMockedDGX(t *testing.T) {
	h, slots, err := openGPUs(Config{GPU: true, OpenGPUs: openMock(mockDGX(0))}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if slots != 8 {
		t.Fatalf("%d slots on a DGX H100, want 8", slots)
	}
	// The allocator the train nodes use hands out healthy GPUs by UUID.
	lease, err := gpu.NewAllocator(h, gpu.ByUUID).TryAcquire(2)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(lease.VisibleDevices(), "GPU-") || strings.Count(lease.VisibleDevices(), ",") != 1 {
		t.Errorf("CUDA_VISIBLE_DEVICES=%s", lease.VisibleDevices())
	}
	lease.Release()

	_, _, err = openGPUs(Config{GPU: true, OpenGPUs: openMock(mockDGX(3))}, quiet)
	if err == nil || !strings.Contains(err.Error(), "all 8 excluded") || !strings.Contains(err.Error(), "ecc") {
		t.Fatalf("every GPU with ECC errors: %v", err)
	}
}

// TestNoDriverMakesNoNVMLCall opens the real library, as retrain-worker
// does: without a driver (this machine) the error is ErrNoGPU and the
// process lives.
func TestNoDriverMakesNoNVMLCall(t *testing.T) {
	h, _, err := openGPUs(Config{GPU: true, OpenGPUs: func() (GPUHost, error) { return nvmlhost.Opener()() }}, quiet)
	if err == nil {
		h.Close()
		t.Skip("this host has a healthy GPU")
	}
	if !errors.Is(err, ErrNoGPU) {
		t.Fatalf("error %v", err)
	}
}
