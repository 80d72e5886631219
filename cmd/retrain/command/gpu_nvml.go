//go:build nvml

package command

import (
	"github.com/retrain-ml/retrain/gpu"
	"github.com/retrain-ml/retrain/gpu/nvmlhost"
)

// gpuOpener opens the host's GPUs through NVML: built with -tags nvml,
// `retrain gpus`, `retrain worker --gpu` and `retrain dev --gpu` work.
func gpuOpener() gpu.Opener { return nvmlhost.Opener() }
