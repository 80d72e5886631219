// Package nvmlhost reads a host's NVIDIA GPUs through NVML
// (github.com/NVIDIA/go-nvml): the backend of package gpu. Only binaries
// meant for GPU hosts import it (retrain-worker; retrain with -tags nvml),
// since compiling go-nvml makes the C compiler print NVML's deprecation
// warnings unless CGO_CFLAGS has -Wno-deprecated-declarations.
//
// # Safety without a driver
//
// On a host without an NVIDIA driver NVML's Init fails with
// ERROR_LIBRARY_NOT_FOUND, and any further NVML call, Shutdown included,
// ends the process (the library's symbols are unresolved: exit 127). The
// API makes such a call impossible: [Open] is the only way to get a
// [*Host]; it calls Init and, when Init fails, returns gpu.ErrNoDriver (or
// another error) and no Host. Every NVML call is a method of a Host that
// exists only after a successful Init, and [Host.Close] calls Shutdown
// once, after which every method returns gpu.ErrClosed without touching
// NVML. Calls to NVML functions younger than some drivers still in use
// (nvmlDeviceGetRemappedRows) are made only when
// Extensions().LookupSymbol finds them in the loaded library.
//
// # Health
//
// A GPU is excluded, with a gpu.Reason, when it has uncorrected ECC errors
// (volatile counter), a page retirement or a row remap pending (the GPU
// needs a reset), a row-remapping failure, a critical XID event since the
// Host was opened, or when one of these cannot be read. Feature checks a
// GPU does not support (ECC on a consumer card, page retirement on Ampere
// and later, which remap rows instead) do not exclude it. XID events are
// collected by one goroutine per Host that waits on an NVML event set with
// a timeout, so Close never waits longer than that timeout. XIDs that NVML
// reports as critical but that are caused by the application (13, 31, 43,
// 45, 68, 109: the list NVIDIA's Kubernetes device plugin skips) are noted
// without excluding the GPU; [WithIgnoredXIDs] changes the list.
//
// # Build
//
// go-nvml loads libnvidia-ml.so at run time, so building needs no driver,
// only a C compiler. NVML 13's headers mark some functions deprecated; the
// warnings come from go-nvml's own C code, which a #cgo directive here
// cannot reach, so build with
//
//	CGO_CFLAGS=-Wno-deprecated-declarations go build ./cmd/retrain-worker
//
// to quiet them. With CGO_ENABLED=0 the package still builds, with the same
// API except [WithLibrary]: Open then always returns gpu.ErrNoDriver, so a
// worker built that way reports no GPUs.
//
// Tests use go-nvml's mocks (pkg/nvml/mock and mock/dgxh100), injected with
// WithLibrary; they need cgo too.
package nvmlhost
