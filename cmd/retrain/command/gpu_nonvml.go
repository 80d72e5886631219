//go:build !nvml

package command

import "github.com/retrain-ml/retrain/gpu"

// gpuOpener is nil: by default this binary links no NVML, so that `go run
// ./cmd/retrain` never compiles go-nvml's cgo code (and its C compiler
// warnings). GPU commands then say to use retrain-worker or -tags nvml.
func gpuOpener() gpu.Opener { return nil }
