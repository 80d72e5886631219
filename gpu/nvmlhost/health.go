//go:build cgo

package nvmlhost

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/retrain-ml/retrain/gpu"
)

// health checks one GPU. The caller holds h.mu for reading.
func (h *Host) health(d *device) gpu.Health {
	out := gpu.Health{Index: d.index, UUID: d.uuid}
	out.Reasons = append(out.Reasons, d.static...)
	out.Notes = append(out.Notes, d.notes...)
	if d.dev != nil {
		out.Reasons = append(out.Reasons, h.memoryHealth(d.dev)...)
	}
	if h.xid != nil {
		reasons, notes := h.xid.report(d.uuid)
		out.Reasons = append(out.Reasons, reasons...)
		out.Notes = append(out.Notes, notes...)
	}
	out.Healthy = len(out.Reasons) == 0
	return out
}

// memoryHealth reads the memory-error state of a GPU. A figure the GPU
// does not support is no reason to exclude it; one it cannot read is.
func (h *Host) memoryHealth(dev nvml.Device) []gpu.Reason {
	var out []gpu.Reason
	unreadable := func(what string, ret nvml.Return) {
		out = append(out, gpu.Reason{Cause: gpu.CauseUnreadable, Detail: fmt.Sprintf("reading %s: %v", what, ret)})
	}

	switch n, ret := dev.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); {
	case ret == nvml.ERROR_NOT_SUPPORTED:
		// ECC off or absent.
	case ret != nvml.SUCCESS:
		unreadable("uncorrected ECC errors", ret)
	case n > 0:
		out = append(out, gpu.Reason{Cause: gpu.CauseECC, Detail: fmt.Sprintf("%d uncorrected ECC errors since the driver loaded", n)})
	}

	// Pre-Ampere GPUs retire pages; Ampere and later remap rows and report
	// page retirement as not supported.
	switch st, ret := dev.GetRetiredPagesPendingStatus(); {
	case ret == nvml.ERROR_NOT_SUPPORTED:
	case ret != nvml.SUCCESS:
		unreadable("pending page retirement", ret)
	case st == nvml.FEATURE_ENABLED:
		out = append(out, gpu.Reason{Cause: gpu.CausePendingRetirement, Detail: "a page retirement is pending: reset the GPU"})
	}

	if h.hasRemappedRows {
		switch _, _, pending, failed, ret := dev.GetRemappedRows(); {
		case ret == nvml.ERROR_NOT_SUPPORTED:
		case ret != nvml.SUCCESS:
			unreadable("remapped rows", ret)
		default:
			if pending {
				out = append(out, gpu.Reason{Cause: gpu.CausePendingRemap, Detail: "a row remap is pending: reset the GPU"})
			}
			if failed {
				out = append(out, gpu.Reason{Cause: gpu.CauseRemapFailure, Detail: "row remapping failed: the GPU needs service"})
			}
		}
	}
	return out
}
