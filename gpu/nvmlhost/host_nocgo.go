//go:build !cgo

package nvmlhost

import (
	"fmt"

	"github.com/retrain-ml/retrain/gpu"
)

// options is empty of NVML specifics without cgo.
type options struct {
	config
}

// Host is a GPU host opened through NVML. Without cgo there is no NVML, so
// Open never returns one; the methods exist so that code using the package
// builds either way.
type Host struct{}

// Open reports ErrNoDriver: this build has no NVML (it was built with
// CGO_ENABLED=0).
func Open(opts ...Option) (*Host, error) {
	return nil, fmt.Errorf("%w: built without cgo, so without NVML", gpu.ErrNoDriver)
}

// Close does nothing.
func (h *Host) Close() error { return nil }

// Count returns 0.
func (h *Host) Count() int { return 0 }

// Inventory returns ErrNoDriver.
func (h *Host) Inventory() (gpu.Inventory, error) { return gpu.Inventory{}, gpu.ErrNoDriver }

// Health returns ErrNoDriver.
func (h *Host) Health() ([]gpu.Health, error) { return nil, gpu.ErrNoDriver }

// Utilization returns ErrNoDriver.
func (h *Host) Utilization(uuid string) (gpu.Utilization, error) {
	return gpu.Utilization{}, gpu.ErrNoDriver
}

// XIDEvents returns nil.
func (h *Host) XIDEvents(uuid string) []gpu.XIDEvent { return nil }
