// Package gpu is what retrain knows of a host's NVIDIA GPUs, whatever reads
// them: their inventory and health ([Inventory], [Health]), an [Allocator]
// that hands healthy GPUs to jobs (CUDA_VISIBLE_DEVICES) and takes them
// back, a [Sampler] that watches their utilization while a job runs to
// catch GPUs that sit idle, and [Host], the interface a backend implements.
//
// # Backends
//
// The NVML backend is package gpu/nvmlhost. It is kept out of this package
// on purpose: it compiles go-nvml's cgo code, whose NVML headers make the C
// compiler print some 150 deprecation warnings on a cold build cache, and a
// repository cannot set CGO_CFLAGS for `go run`. Only binaries meant for GPU
// hosts link it: retrain-worker always, the retrain CLI when built with
// `-tags nvml`. Everything else (the train node, the worker's GPU queue,
// `retrain gpus`) takes an [Opener], which is nil in a binary without a
// backend: a GPU feature then fails at once with [ErrNoNVML].
package gpu
