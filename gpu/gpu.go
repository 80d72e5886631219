package gpu

import (
	"errors"
	"fmt"
	"time"
)

// ErrNoDriver is returned by Open when the host has no usable NVIDIA driver
// (NVML's library is missing or the kernel driver is not loaded), and
// always by a build without cgo. It means "no GPUs here", not a fault.
var ErrNoDriver = errors.New("gpu: no NVIDIA driver")

// ErrClosed is returned by the methods of a Host after Close.
var ErrClosed = errors.New("gpu: host is closed")

// ErrNoNVML is why a GPU feature fails in a binary that links no NVML
// backend (see the package doc, "Backends").
var ErrNoNVML = errors.New("this binary is built without NVML: on a GPU host run retrain-worker, or build retrain with `go build -tags nvml ./cmd/retrain`")

// Host is a machine's GPUs, open for reading. nvmlhost.Open returns one.
type Host interface {
	// Inventory reads every GPU's figures, processes and health.
	Inventory() (Inventory, error)
	HealthReporter
	UtilizationReader
	// Close releases the backend; the other methods then return ErrClosed.
	Close() error
}

// Opener opens the host's GPUs. It returns an error wrapping ErrNoDriver
// when the host has no usable NVIDIA driver, and no Host with any error.
type Opener func() (Host, error)

// Inventory is what a host has, at one moment.
type Inventory struct {
	DriverVersion string `json:"driver_version"`
	// CUDADriverVersion is the CUDA version the driver supports, as NVML
	// reports it (12040 is CUDA 12.4); 0 when unknown.
	CUDADriverVersion int      `json:"cuda_driver_version"`
	Devices           []Device `json:"devices"`
}

// Device describes one GPU. Figures NVML could not read are zero and named
// in Unavailable with NVML's reason (for example "not supported").
type Device struct {
	Index       int         `json:"index"`
	UUID        string      `json:"uuid"`
	Name        string      `json:"name"`
	MemoryTotal uint64      `json:"memory_total_bytes"`
	MemoryUsed  uint64      `json:"memory_used_bytes"`
	Utilization Utilization `json:"utilization"`
	// TemperatureC is the GPU core temperature in degrees Celsius.
	TemperatureC uint32 `json:"temperature_c"`
	// PowerMilliwatts is the power draw of the board.
	PowerMilliwatts uint32 `json:"power_mw"`
	// ECCUncorrected counts uncorrected ECC errors since the driver loaded
	// (NVML's volatile counter).
	ECCUncorrected uint64            `json:"ecc_uncorrected_volatile"`
	Processes      []Process         `json:"processes"`
	Health         Health            `json:"health"`
	Unavailable    map[string]string `json:"unavailable,omitempty"`
}

// Fields named in Device.Unavailable.
const (
	FieldName        = "name"
	FieldMemory      = "memory"
	FieldUtilization = "utilization"
	FieldTemperature = "temperature"
	FieldPower       = "power"
	FieldECC         = "ecc"
	FieldProcesses   = "processes"
)

// Utilization is NVML's utilization over its last sample period (1/6 s to
// 1 s depending on the GPU), in percent.
type Utilization struct {
	// GPU is the share of time one or more kernels ran.
	GPU uint32 `json:"gpu_percent"`
	// Memory is the share of time device memory was read or written.
	Memory uint32 `json:"memory_percent"`
}

// Process is a compute process running on a GPU.
type Process struct {
	PID        uint32 `json:"pid"`
	UsedMemory uint64 `json:"used_memory_bytes"`
}

// Health says whether a GPU may be given to a job, and if not, why.
type Health struct {
	Index   int      `json:"index"`
	UUID    string   `json:"uuid"`
	Healthy bool     `json:"healthy"`
	Reasons []Reason `json:"reasons,omitempty"`
	// Notes are facts worth knowing that do not exclude the GPU, such as
	// "XID events not supported" or an application XID.
	Notes []string `json:"notes,omitempty"`
}

// Cause classifies why a GPU is excluded.
type Cause string

// Causes of exclusion.
const (
	CauseECC               Cause = "ecc_uncorrected"
	CausePendingRetirement Cause = "pending_page_retirement"
	CausePendingRemap      Cause = "pending_row_remap"
	CauseRemapFailure      Cause = "row_remap_failure"
	CauseXID               Cause = "xid"
	// CauseUnreadable: a health figure could not be read (the GPU may be
	// lost), or XID events could not be watched. A GPU whose health is
	// unknown is not given to a job.
	CauseUnreadable Cause = "unreadable"
)

// Reason is one cause of exclusion with its details.
type Reason struct {
	Cause  Cause  `json:"cause"`
	Detail string `json:"detail"`
}

func (r Reason) String() string { return fmt.Sprintf("%s: %s", r.Cause, r.Detail) }

// Healthy returns the healthy GPUs of hs, in order.
func Healthy(hs []Health) []Health {
	var out []Health
	for _, h := range hs {
		if h.Healthy {
			out = append(out, h)
		}
	}
	return out
}

// XIDEvent is a critical XID error NVML reported for a GPU.
type XIDEvent struct {
	XID uint64    `json:"xid"`
	At  time.Time `json:"at"`
}
