//go:build cgo

package gpu

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// health checks one GPU. The caller holds h.mu for reading.
func (h *Host) health(d *device) Health {
	out := Health{Index: d.index, UUID: d.uuid}
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
func (h *Host) memoryHealth(dev nvml.Device) []Reason {
	var out []Reason
	unreadable := func(what string, ret nvml.Return) {
		out = append(out, Reason{CauseUnreadable, fmt.Sprintf("reading %s: %v", what, ret)})
	}

	switch n, ret := dev.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); {
	case ret == nvml.ERROR_NOT_SUPPORTED:
		// ECC off or absent.
	case ret != nvml.SUCCESS:
		unreadable("uncorrected ECC errors", ret)
	case n > 0:
		out = append(out, Reason{CauseECC, fmt.Sprintf("%d uncorrected ECC errors since the driver loaded", n)})
	}

	// Pre-Ampere GPUs retire pages; Ampere and later remap rows and report
	// page retirement as not supported.
	switch st, ret := dev.GetRetiredPagesPendingStatus(); {
	case ret == nvml.ERROR_NOT_SUPPORTED:
	case ret != nvml.SUCCESS:
		unreadable("pending page retirement", ret)
	case st == nvml.FEATURE_ENABLED:
		out = append(out, Reason{CausePendingRetirement, "a page retirement is pending: reset the GPU"})
	}

	if h.hasRemappedRows {
		switch _, _, pending, failed, ret := dev.GetRemappedRows(); {
		case ret == nvml.ERROR_NOT_SUPPORTED:
		case ret != nvml.SUCCESS:
			unreadable("remapped rows", ret)
		default:
			if pending {
				out = append(out, Reason{CausePendingRemap, "a row remap is pending: reset the GPU"})
			}
			if failed {
				out = append(out, Reason{CauseRemapFailure, "row remapping failed: the GPU needs service"})
			}
		}
	}
	return out
}
