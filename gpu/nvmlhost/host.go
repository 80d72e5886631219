//go:build cgo

package nvmlhost

import (
	"errors"
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/retrain-ml/retrain/gpu"
)

// options are Open's settings; the NVML library is one only with cgo.
type options struct {
	config
	lib nvml.Interface
}

// WithLibrary makes Open use lib instead of the host's libnvidia-ml: tests
// pass go-nvml's mocks. Only in builds with cgo, since go-nvml's types need
// it.
func WithLibrary(lib nvml.Interface) Option {
	return func(o *options) { o.lib = lib }
}

// Host is an initialized NVML session on one machine. Its methods are safe
// for concurrent use. A Host exists only after NVML's Init succeeded, which
// is what makes every NVML call it makes safe; see the package doc.
type Host struct {
	lib nvml.Interface
	cfg config

	// Fixed at Open.
	devices           []*device
	driverVersion     string
	cudaDriverVersion int
	// hasRemappedRows: the loaded library exports nvmlDeviceGetRemappedRows
	// (R450 and later); calling a missing symbol would end the process.
	hasRemappedRows bool
	xid             *xidWatcher // nil when XID events cannot be watched

	// mu guards closed against the NVML calls of every method: readers
	// hold it while they call NVML, Close takes it to shut NVML down.
	mu     sync.RWMutex
	closed bool
}

// device is a GPU found at Open. dev is nil when NVML gave no handle.
type device struct {
	index int
	uuid  string
	dev   nvml.Device
	// static are exclusions found at Open (no handle, no UUID, XID events
	// that could not be registered); notes likewise.
	static []gpu.Reason
	notes  []string
}

// Open initializes NVML and finds the host's GPUs. Without a driver it
// returns an error wrapping ErrNoDriver and calls nothing after Init.
// Errors wrap NVML's nvml.Return, so errors.Is(err, nvml.ERROR_...) works.
func Open(opts ...Option) (*Host, error) {
	o := options{config: defaultConfig()}
	for _, opt := range opts {
		opt(&o)
	}
	lib := o.lib
	if lib == nil {
		lib = nvml.New()
	}

	if ret := lib.Init(); ret != nvml.SUCCESS {
		// Nothing more may be called on lib: after a failed Init even
		// Shutdown can end the process.
		if errors.Is(ret, nvml.ERROR_LIBRARY_NOT_FOUND) || errors.Is(ret, nvml.ERROR_DRIVER_NOT_LOADED) {
			return nil, fmt.Errorf("%w: nvml init: %w", gpu.ErrNoDriver, ret)
		}
		return nil, fmt.Errorf("gpu: nvml init: %w", ret)
	}

	h := &Host{lib: lib, cfg: o.config}
	if err := h.discover(); err != nil {
		// Init succeeded, so Shutdown is safe and releases the library.
		if ret := lib.Shutdown(); ret != nvml.SUCCESS {
			err = errors.Join(err, fmt.Errorf("gpu: nvml shutdown: %w", ret))
		}
		return nil, err
	}
	h.xid = startXIDWatcher(lib, h.devices, h.cfg)
	return h, nil
}

// discover reads what does not change while NVML is initialized: driver
// versions, device handles and UUIDs, symbol availability.
func (h *Host) discover() error {
	n, ret := h.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("gpu: counting devices: %w", ret)
	}
	if v, ret := h.lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		h.driverVersion = v
	}
	if v, ret := h.lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		h.cudaDriverVersion = v
	}
	h.hasRemappedRows = h.lib.Extensions().LookupSymbol("nvmlDeviceGetRemappedRows") == nil

	for i := range n {
		d := &device{index: i}
		h.devices = append(h.devices, d)
		dev, ret := h.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			d.static = append(d.static, gpu.Reason{Cause: gpu.CauseUnreadable, Detail: fmt.Sprintf("no device handle: %v", ret)})
			continue
		}
		d.dev = dev
		uuid, ret := dev.GetUUID()
		if ret != nvml.SUCCESS {
			// Without a UUID the GPU cannot be named to CUDA reliably.
			d.static = append(d.static, gpu.Reason{Cause: gpu.CauseUnreadable, Detail: fmt.Sprintf("no UUID: %v", ret)})
			continue
		}
		d.uuid = uuid
	}
	return nil
}

// Close stops watching XID events and shuts NVML down. Further calls
// return nil; every other method then returns ErrClosed.
func (h *Host) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	// The watcher calls NVML: it must be gone before Shutdown.
	var errs []error
	if h.xid != nil {
		errs = append(errs, h.xid.stop())
	}
	if ret := h.lib.Shutdown(); ret != nvml.SUCCESS {
		errs = append(errs, fmt.Errorf("gpu: nvml shutdown: %w", ret))
	}
	return errors.Join(errs...)
}

// Count returns the number of GPUs found at Open, healthy or not.
func (h *Host) Count() int { return len(h.devices) }

// lock holds off Close for the duration of a method's NVML calls.
func (h *Host) lock() error {
	h.mu.RLock()
	if h.closed {
		h.mu.RUnlock()
		return gpu.ErrClosed
	}
	return nil
}

// Inventory reads every GPU's figures, processes and health.
func (h *Host) Inventory() (gpu.Inventory, error) {
	if err := h.lock(); err != nil {
		return gpu.Inventory{}, err
	}
	defer h.mu.RUnlock()
	inv := gpu.Inventory{
		DriverVersion:     h.driverVersion,
		CUDADriverVersion: h.cudaDriverVersion,
		Devices:           make([]gpu.Device, 0, len(h.devices)),
	}
	for _, d := range h.devices {
		inv.Devices = append(inv.Devices, h.describe(d))
	}
	return inv, nil
}

// describe reads one GPU's figures.
func (h *Host) describe(d *device) gpu.Device {
	out := gpu.Device{Index: d.index, UUID: d.uuid, Health: h.health(d)}
	if d.dev == nil {
		out.Unavailable = make(map[string]string)
		for _, f := range []string{gpu.FieldName, gpu.FieldMemory, gpu.FieldUtilization, gpu.FieldTemperature, gpu.FieldPower, gpu.FieldECC, gpu.FieldProcesses} {
			out.Unavailable[f] = "no device handle"
		}
		return out
	}
	missing := func(field string, ret nvml.Return) {
		if out.Unavailable == nil {
			out.Unavailable = make(map[string]string)
		}
		out.Unavailable[field] = ret.Error()
	}
	var ret nvml.Return
	if out.Name, ret = d.dev.GetName(); ret != nvml.SUCCESS {
		missing(gpu.FieldName, ret)
	}
	if mem, ret := d.dev.GetMemoryInfo(); ret == nvml.SUCCESS {
		out.MemoryTotal, out.MemoryUsed = mem.Total, mem.Used
	} else {
		missing(gpu.FieldMemory, ret)
	}
	if u, ret := d.dev.GetUtilizationRates(); ret == nvml.SUCCESS {
		out.Utilization = gpu.Utilization{GPU: u.Gpu, Memory: u.Memory}
	} else {
		missing(gpu.FieldUtilization, ret)
	}
	if out.TemperatureC, ret = d.dev.GetTemperature(nvml.TEMPERATURE_GPU); ret != nvml.SUCCESS {
		missing(gpu.FieldTemperature, ret)
	}
	if out.PowerMilliwatts, ret = d.dev.GetPowerUsage(); ret != nvml.SUCCESS {
		missing(gpu.FieldPower, ret)
	}
	if out.ECCUncorrected, ret = d.dev.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); ret != nvml.SUCCESS {
		missing(gpu.FieldECC, ret)
	}
	if procs, ret := d.dev.GetComputeRunningProcesses(); ret == nvml.SUCCESS {
		out.Processes = make([]gpu.Process, 0, len(procs))
		for _, p := range procs {
			out.Processes = append(out.Processes, gpu.Process{PID: p.Pid, UsedMemory: p.UsedGpuMemory})
		}
	} else {
		missing(gpu.FieldProcesses, ret)
	}
	return out
}

// Health checks every GPU; see the package doc for what excludes one. It
// implements HealthReporter for an Allocator.
func (h *Host) Health() ([]gpu.Health, error) {
	if err := h.lock(); err != nil {
		return nil, err
	}
	defer h.mu.RUnlock()
	out := make([]gpu.Health, 0, len(h.devices))
	for _, d := range h.devices {
		out = append(out, h.health(d))
	}
	return out, nil
}

// Utilization reads the utilization of the GPU with the given UUID. It
// implements UtilizationReader for a Sampler.
func (h *Host) Utilization(uuid string) (gpu.Utilization, error) {
	if err := h.lock(); err != nil {
		return gpu.Utilization{}, err
	}
	defer h.mu.RUnlock()
	for _, d := range h.devices {
		if d.uuid != uuid || d.dev == nil {
			continue
		}
		u, ret := d.dev.GetUtilizationRates()
		if ret != nvml.SUCCESS {
			return gpu.Utilization{}, fmt.Errorf("gpu: utilization of %s: %w", uuid, ret)
		}
		return gpu.Utilization{GPU: u.Gpu, Memory: u.Memory}, nil
	}
	return gpu.Utilization{}, fmt.Errorf("gpu: no GPU with UUID %q", uuid)
}
