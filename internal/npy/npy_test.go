package npy

import (
	"bytes"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	in := []float32{1, 2, 3, float32(math.NaN()), 5, 6}
	if err := Write(&buf, in, 2, 3); err != nil {
		t.Fatal(err)
	}
	if (buf.Len()-len(in)*4)%64 != 0 {
		t.Errorf("data starts at %d, want a multiple of 64", buf.Len()-len(in)*4)
	}
	out, shape, err := Read[float32](bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(shape, []int{2, 3}) || out[0] != 1 || out[5] != 6 || !math.IsNaN(float64(out[3])) {
		t.Errorf("read %v %v", out, shape)
	}
	if _, _, err := Read[int64](bytes.NewReader(buf.Bytes())); err == nil || !strings.Contains(err.Error(), "dtype <f4, want <i8") {
		t.Errorf("wrong dtype: %v", err)
	}
	if err := Write(&buf, []int64{1, 2, 3}, 2, 2); err == nil {
		t.Error("a shape that does not hold the data was accepted")
	}
	buf.Reset()
	if err := Write(&buf, []int64{}); err != nil {
		t.Fatal(err)
	}
	if out, shape, err := Read[int64](&buf); err != nil || len(out) != 0 || !slices.Equal(shape, []int{0}) {
		t.Errorf("empty: %v %v %v", out, shape, err)
	}
}

// TestNumPyReadsIt: numpy.load reads what Write writes, unchanged; skipped
// where no Python with NumPy is installed.
func TestNumPyReadsIt(t *testing.T) {
	py := "/usr/bin/python3"
	if exec.Command(py, "-c", "import numpy").Run() != nil {
		t.Skip("no /usr/bin/python3 with numpy (Debian: apt-get install python3-numpy)")
	}
	dir := t.TempDir()
	if err := WriteFile(filepath.Join(dir, "f.npy"), []float32{0.5, -1, 2.25, 4}, 2, 2); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(filepath.Join(dir, "i.npy"), []int64{-1, 1 << 40, 7}); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, "-c", `
import numpy as np, sys
f = np.load(sys.argv[1] + "/f.npy"); i = np.load(sys.argv[1] + "/i.npy")
print(f.dtype, f.shape, f.sum(), i.dtype, i.shape, i.tolist())
`, dir).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "float32 (2, 2) 5.75 int64 (3,) [-1, 1099511627776, 7]" {
		t.Errorf("numpy read: %s", got)
	}
	// And what NumPy writes, Read reads.
	if out, err := exec.Command(py, "-c", `import numpy as np, sys; np.save(sys.argv[1] + "/n.npy", np.arange(6, dtype=np.int32).reshape(3, 2))`, dir).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	f, err := os.Open(filepath.Join(dir, "n.npy"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, shape, err := Read[int32](f)
	if err != nil || !slices.Equal(shape, []int{3, 2}) || !slices.Equal(got, []int32{0, 1, 2, 3, 4, 5}) {
		t.Errorf("read numpy's file: %v %v %v", got, shape, err)
	}
}
