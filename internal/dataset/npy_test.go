package dataset

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/internal/npy"
)

func npyTestData(t *testing.T) (*Data, Schema) {
	t.Helper()
	s := Schema{Label: "label", Date: "date", RequestID: "request_id", Slice: "date",
		Columns: []Column{{Name: "x", Kind: Dense}, {Name: "user_id", Kind: ID}, {Name: "recent", Kind: IDList}}}
	rows := []any{
		map[string]any{ColRequestID: int64(2), ColDate: int64(20400), ColLabel: 1.0, ColSlice: "2025-11-08", "x": 0.5, "user_id": int64(7), "recent": []any{int64(1), int64(2)}},
		map[string]any{ColRequestID: int64(1), ColDate: int64(20401), ColLabel: 0.0, ColSlice: "2025-11-09", "x": nil, "user_id": nil, "recent": []any{}},
	}
	d, err := Load(s, rows)
	if err != nil {
		t.Fatal(err)
	}
	return d, s
}

func TestWriteNPY(t *testing.T) {
	d, s := npyTestData(t)
	dir := t.TempDir()
	got, err := d.WriteNPY(dir, s)
	if err != nil {
		t.Fatal(err)
	}
	var onDisk NPYSchema
	b, _ := os.ReadFile(filepath.Join(dir, NPYSchemaFile))
	if err := json.Unmarshal(b, &onDisk); err != nil || onDisk.Rows != 2 || !slices.Equal(onDisk.Sparse, []string{"user_id", "recent"}) || onDisk.Slice != "date" {
		t.Fatalf("schema.json %s: %v", b, err)
	}
	read := func(name string) *os.File {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	// Rows come in request id order: request 1 (label 0) first.
	label, _, _ := npy.Read[float32](read("label.npy"))
	dense, shape, _ := npy.Read[float32](read("dense.npy"))
	if !slices.Equal(label, []float32{0, 1}) || !slices.Equal(shape, []int{2, 1}) || !math.IsNaN(float64(dense[0])) || dense[1] != 0.5 {
		t.Errorf("label %v, dense %v %v", label, dense, shape)
	}
	vals, _, _ := npy.Read[int64](read("sparse.recent.values.npy"))
	offs, _, _ := npy.Read[int64](read("sparse.recent.offsets.npy"))
	if !slices.Equal(vals, []int64{1, 2}) || !slices.Equal(offs, []int64{0, 0, 2}) {
		t.Errorf("recent: values %v offsets %v", vals, offs)
	}
	uv, _, _ := npy.Read[int64](read("sparse.user_id.values.npy"))
	uo, _, _ := npy.Read[int64](read("sparse.user_id.offsets.npy"))
	if !slices.Equal(uv, []int64{7}) || !slices.Equal(uo, []int64{0, 0, 1}) {
		t.Errorf("user_id: values %v offsets %v", uv, uo)
	}
	codes, _, _ := npy.Read[int32](read("slice.npy"))
	if !slices.Equal(codes, []int32{0, 1}) || !slices.Equal(got.Slices, []string{"2025-11-09", "2025-11-08"}) {
		t.Errorf("slices %v %v", codes, got.Slices)
	}
	if len(got.Files) != 9 {
		t.Errorf("files %v", got.Files)
	}
}

// TestNumPyLoadsSplit: the folder loads with numpy alone, as a trainer
// program reads it.
func TestNumPyLoadsSplit(t *testing.T) {
	py := "/usr/bin/python3"
	if exec.Command(py, "-c", "import numpy").Run() != nil {
		t.Skip("no /usr/bin/python3 with numpy (Debian: apt-get install python3-numpy)")
	}
	d, s := npyTestData(t)
	dir := t.TempDir()
	if _, err := d.WriteNPY(dir, s); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, "-c", `
import json, sys, numpy as np
d = sys.argv[1]; s = json.load(open(d + "/schema.json"))
for name, f in s["files"].items():
    a = np.load(d + "/" + name)
    assert str(a.dtype) == f["dtype"] and list(a.shape) == f["shape"], (name, a.dtype, a.shape, f)
x = np.load(d + "/dense.npy")
print(s["rows"], np.isnan(x[0, 0]), np.load(d + "/sparse.recent.offsets.npy").tolist())
`, dir).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "2 True [0, 0, 2]" {
		t.Errorf("numpy: %s", got)
	}
}
