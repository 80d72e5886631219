// Package torchtest finds the Python that the PyTorch tests and benchmarks
// run examples/torch with, and skips them, saying how to install it, where
// there is none.
package torchtest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
)

// Python returns the Python that imports torch and numpy: $RETRAIN_PYTHON,
// else /usr/bin/python3 (Debian's python3-torch installs there; the first
// python3 on PATH may be another interpreter). It skips tb under -short
// (these train models) and when that Python lacks torch or numpy. It sets
// PYTHONDONTWRITEBYTECODE (for the whole test process) so runs leave no __pycache__ in examples/torch;
// workers pass it on to the programs they start only where a test's
// --pass-env lists it.
func Python(tb testing.TB) string {
	tb.Helper()
	if testing.Short() {
		tb.Skip("trains with PyTorch: not in -short")
	}
	py := os.Getenv("RETRAIN_PYTHON")
	if py == "" {
		py = "/usr/bin/python3"
	}
	if err := probe(py); err != nil {
		tb.Skipf("%s cannot import torch and numpy (%v): apt-get install python3-torch python3-numpy, or set RETRAIN_PYTHON to a Python that has them",
			py, err)
	}
	// os.Setenv, not tb.Setenv: the multi-host tests run in parallel, and
	// testing refuses tb.Setenv there. The value is the same for every
	// caller and is never unset, so sharing it across tests is safe.
	if err := os.Setenv("PYTHONDONTWRITEBYTECODE", "1"); err != nil {
		tb.Fatalf("set PYTHONDONTWRITEBYTECODE: %v", err)
	}
	return py
}

// probes holds each interpreter's answer for the life of the test
// process: importing torch costs a CPU-second or more, and a package's
// PyTorch tests (the integration package has a dozen) would each pay it
// again for the same answer.
var probes sync.Map // interpreter path -> func() error

// probe reports whether py imports torch and numpy, asking it once per
// process.
func probe(py string) error {
	f, _ := probes.LoadOrStore(py, sync.OnceValue(func() error {
		out, err := exec.Command(py, "-c", "import torch, numpy").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, bytes.TrimSpace(out))
		}
		return nil
	}))
	return f.(func() error)()
}
