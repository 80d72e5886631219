package cli

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/gpu"
)

type fakeInventory struct{ inv gpu.Inventory }

func (f fakeInventory) Inventory() (gpu.Inventory, error) { return f.inv, nil }
func (f fakeInventory) Close() error                      { return nil }

// The retrain CLI built without -tags nvml has no GPU backend: `retrain
// gpus` fails at once and says which binary to use.
func TestGPUsCommandWithoutNVML(t *testing.T) {
	var out bytes.Buffer
	cmd := NewGPUsCommand(&App{Out: &out, Err: &out})
	cmd.SetArgs(nil)
	err := cmd.Execute()
	if !errors.Is(err, gpu.ErrNoNVML) || !strings.Contains(err.Error(), "retrain-worker") || !strings.Contains(err.Error(), "-tags nvml") {
		t.Fatalf("retrain gpus without NVML: %v", err)
	}
}

func TestGPUsCommand(t *testing.T) {
	h100 := gpu.Inventory{DriverVersion: "550.54", CUDADriverVersion: 12040, Devices: []gpu.Device{
		{Index: 0, UUID: "GPU-a", Name: "NVIDIA H100 80GB HBM3", MemoryTotal: 80 << 30, Health: gpu.Health{Healthy: true}},
		{Index: 1, UUID: "GPU-b", Name: "NVIDIA H100 80GB HBM3", MemoryTotal: 80 << 30, ECCUncorrected: 2,
			Health: gpu.Health{Reasons: []gpu.Reason{{Cause: gpu.CauseECC, Detail: "2 uncorrected"}}}},
	}}
	tests := []struct {
		name string
		open func() (inventoryHost, error)
		args []string
		want []string
	}{
		{"no driver", func() (inventoryHost, error) { return nil, fmt.Errorf("%w: nvml init", gpu.ErrNoDriver) }, nil,
			[]string{"no NVIDIA driver found"}},
		{"no driver, JSON", func() (inventoryHost, error) { return nil, gpu.ErrNoDriver }, []string{"--json"},
			[]string{`"devices":[]`}},
		{"inventory", func() (inventoryHost, error) { return fakeInventory{h100}, nil }, nil,
			[]string{"2 GPUs, 1 healthy", "GPU-a", "EXCLUDED: 2 uncorrected"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			app := &App{Out: &out, Err: &out}
			cmd := newGPUsCommand(app, tt.open)
			cmd.SetArgs(tt.args)
			if err := cmd.Execute(); err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}
