package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/retrain-ml/retrain/gpu"
)

// GPUHost is what a GPU worker needs of its host's GPUs: their health (to
// count and lease the healthy ones), their utilization (to sample while a
// job runs), and Close. Every gpu.Host implements it.
type GPUHost interface {
	gpu.HealthReporter
	gpu.UtilizationReader
	Close() error
}

// ErrNoGPU is why a worker started with --gpu refuses to start: no driver,
// no GPU, or no healthy one.
var ErrNoGPU = errors.New("--gpu: no healthy NVIDIA GPU on this host")

// openGPUs opens the host's GPUs for a worker started with --gpu and
// returns the host and the GPU queue's capacity: one slot per healthy GPU
// (or --gpu-slots, capped to that).
//
// Why no Temporal session or worker-specific queue: a train node is one
// activity from the data download to the model upload, so the steps of a
// job that must share a host are already one step, and everything nodes
// hand each other (the split, training checkpoints, the candidate) lives in
// the object store. A retried train node therefore resumes on any GPU
// worker, which is what a lost host needs; pinning it to the host that
// died would only make it wait for that host.
func openGPUs(cfg Config, logger *slog.Logger) (GPUHost, int, error) {
	if cfg.OpenGPUs == nil {
		return nil, 0, fmt.Errorf("--gpu: %w", gpu.ErrNoNVML)
	}
	host, err := cfg.OpenGPUs()
	if errors.Is(err, gpu.ErrNoDriver) {
		return nil, 0, fmt.Errorf("%w: no NVIDIA driver found (%v); start the worker without --gpu", ErrNoGPU, err)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("--gpu: %w", err)
	}
	hs, err := host.Health()
	if err != nil {
		closeGPUs(host, logger)
		return nil, 0, fmt.Errorf("--gpu: read GPU health: %w", err)
	}
	healthy := gpu.Healthy(hs)
	if len(healthy) == 0 {
		closeGPUs(host, logger)
		var why []string
		for _, h := range hs {
			for _, r := range h.Reasons {
				why = append(why, fmt.Sprintf("GPU %d: %s", h.Index, r))
			}
		}
		if len(hs) == 0 {
			return nil, 0, fmt.Errorf("%w: the driver reports no GPUs", ErrNoGPU)
		}
		return nil, 0, fmt.Errorf("%w: all %d excluded (%s)", ErrNoGPU, len(hs), strings.Join(why, "; "))
	}
	slots := len(healthy)
	if cfg.GPUSlots > 0 {
		slots = min(cfg.GPUSlots, slots)
	}
	for _, h := range hs {
		if !h.Healthy {
			logger.Warn("GPU excluded", "index", h.Index, "uuid", h.UUID, "reasons", h.Reasons)
		}
	}
	logger.Info("GPUs ready", "gpus", len(hs), "healthy", len(healthy), "slots", slots)
	return host, slots, nil
}

func closeGPUs(h GPUHost, logger *slog.Logger) {
	if h == nil {
		return
	}
	if err := h.Close(); err != nil {
		logger.Warn("close NVML", "error", err)
	}
}

// CheckGPU reports whether a worker with cfg could start its GPU queue,
// without starting anything: `retrain worker --gpu` calls it before it
// connects to Temporal, so a host without a usable GPU is told so first.
func CheckGPU(cfg Config, logger *slog.Logger) error {
	if !cfg.GPU {
		return nil
	}
	h, _, err := openGPUs(cfg, logger)
	if err != nil {
		return err
	}
	closeGPUs(h, logger)
	return nil
}

// healthyGPUs counts h's healthy GPUs; 0 without GPUs (nil h) or when
// their health cannot be read.
func healthyGPUs(h GPUHost) int {
	if h == nil {
		return 0
	}
	hs, err := h.Health()
	if err != nil {
		return 0
	}
	return len(gpu.Healthy(hs))
}
