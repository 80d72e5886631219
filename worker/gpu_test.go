package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/gpu"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fakeHost is a GPU host whose GPUs have the given health.
type fakeHost struct {
	health []gpu.Health
	closed bool
}

func (f *fakeHost) Health() ([]gpu.Health, error)               { return f.health, nil }
func (f *fakeHost) Utilization(string) (gpu.Utilization, error) { return gpu.Utilization{}, nil }
func (f *fakeHost) Close() error                                { f.closed = true; return nil }

func gpus(healthy ...bool) []gpu.Health {
	hs := make([]gpu.Health, len(healthy))
	for i, ok := range healthy {
		hs[i] = gpu.Health{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Healthy: ok}
		if !ok {
			hs[i].Reasons = []gpu.Reason{{Cause: gpu.CauseECC, Detail: "3 uncorrected errors"}}
		}
	}
	return hs
}

func TestOpenGPUs(t *testing.T) {
	noDriver := func() (GPUHost, error) {
		return nil, fmt.Errorf("%w: nvml init: ERROR_LIBRARY_NOT_FOUND", gpu.ErrNoDriver)
	}
	tests := []struct {
		name      string
		open      func() (GPUHost, error)
		host      *fakeHost
		slots     int
		wantSlots int
		wantErr   string
	}{
		{name: "no driver", open: noDriver, wantErr: "no NVIDIA driver found"},
		{name: "no GPUs", host: &fakeHost{}, wantErr: "no GPUs"},
		{name: "every GPU excluded", host: &fakeHost{health: gpus(false, false)}, wantErr: "ecc_uncorrected"},
		{name: "one slot per healthy GPU", host: &fakeHost{health: gpus(true, false, true)}, wantSlots: 2},
		{name: "slots capped to the healthy GPUs", host: &fakeHost{health: gpus(true, true)}, slots: 8, wantSlots: 2},
		{name: "fewer slots than GPUs", host: &fakeHost{health: gpus(true, true, true, true)}, slots: 1, wantSlots: 1},
		{name: "NVML fails otherwise", open: func() (GPUHost, error) { return nil, errors.New("nvml init: ERROR_NO_PERMISSION") }, wantErr: "NO_PERMISSION"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{GPU: true, GPUSlots: tt.slots, OpenGPUs: tt.open}
			if tt.host != nil {
				cfg.OpenGPUs = func() (GPUHost, error) { return tt.host, nil }
			}
			h, slots, err := openGPUs(cfg, quiet)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one about %q", err, tt.wantErr)
				}
				if tt.host != nil && !tt.host.closed {
					t.Error("NVML left open after refusing")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if slots != tt.wantSlots || h != tt.host {
				t.Fatalf("slots %d, want %d", slots, tt.wantSlots)
			}
		})
	}
}

// TestGPUWorkerRefusesToStart: New stops before it touches Temporal or
// storage when --gpu finds no usable GPU (the client here is nil).
func TestGPUWorkerRefusesToStart(t *testing.T) {
	for _, open := range []func() (GPUHost, error){
		func() (GPUHost, error) { return nil, gpu.ErrNoDriver },
		func() (GPUHost, error) { return &fakeHost{health: gpus(false)}, nil },
	} {
		w, err := New(context.Background(), nil, "default", Config{GPU: true, OpenGPUs: open}, quiet)
		if !errors.Is(err, ErrNoGPU) || w != nil {
			t.Fatalf("New: %v", err)
		}
	}
}

// A binary that links no NVML (the retrain CLI without -tags nvml) passes
// no opener: --gpu then fails at once and says which binary has NVML.
func TestGPUWithoutNVML(t *testing.T) {
	h, _, err := openGPUs(Config{GPU: true}, quiet)
	if h != nil || !errors.Is(err, gpu.ErrNoNVML) || !strings.Contains(err.Error(), "retrain-worker") {
		t.Fatalf("openGPUs without an opener = %v, %v; want gpu.ErrNoNVML naming retrain-worker", h, err)
	}
	if err := CheckGPU(Config{GPU: true}, quiet); !errors.Is(err, gpu.ErrNoNVML) {
		t.Fatalf("CheckGPU without an opener: %v", err)
	}
}

func TestCheckGPU(t *testing.T) {
	if err := CheckGPU(Config{}, quiet); err != nil {
		t.Fatalf("without --gpu: %v", err)
	}
	host := &fakeHost{health: gpus(true)}
	if err := CheckGPU(Config{GPU: true, OpenGPUs: func() (GPUHost, error) { return host, nil }}, quiet); err != nil || !host.closed {
		t.Fatalf("healthy GPU: %v, closed %v", err, host.closed)
	}
	err := CheckGPU(Config{GPU: true, OpenGPUs: func() (GPUHost, error) { return nil, gpu.ErrNoDriver }}, quiet)
	if !errors.Is(err, ErrNoGPU) {
		t.Fatalf("no driver: %v", err)
	}
}
