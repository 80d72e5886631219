//go:build cgo

package worker

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/retrain-ml/retrain/gpu"
	"github.com/retrain-ml/retrain/gpu/nvmlhost"
)

// mockDGX is go-nvml's DGX H100 mock with the health figures the gpu
// package reads, eccErrors uncorrected ECC errors on every GPU, and no XID
// events.
func mockDGX(eccErrors uint64) *server.Server {
	srv := dgxh100.New()
	set := &mock.EventSet{
		WaitFunc: func(timeoutMS uint32) (nvml.EventData, nvml.Return) {
			time.Sleep(time.Duration(timeoutMS) * time.Millisecond)
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		},
		FreeFunc: func() nvml.Return { return nvml.SUCCESS },
	}
	srv.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return set, nvml.SUCCESS }
	for _, dev := range srv.Devices {
		d := dev.(*server.Device)
		d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: 90}, nvml.SUCCESS }
		d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 40, nvml.SUCCESS }
		d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 300_000, nvml.SUCCESS }
		d.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) { return eccErrors, nvml.SUCCESS }
		d.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.SUCCESS }
		d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
		d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return nvml.EventTypeXidCriticalError, nvml.SUCCESS }
		d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	}
	return srv
}

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
