package nvmlhost

import "github.com/retrain-ml/retrain/gpu"

// Opener returns the gpu.Opener a binary passes to the code that needs
// GPUs: it opens NVML with opts.
func Opener(opts ...Option) gpu.Opener {
	return func() (gpu.Host, error) {
		h, err := Open(opts...)
		if err != nil {
			// No Host: nothing to close, and no NVML call may follow. A
			// nil *Host must not become a non-nil gpu.Host.
			return nil, err
		}
		return h, nil
	}
}
