package dataset

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/retrain-ml/retrain/internal/npy"
)

// NPYSchema is schema.json of a split dataset written as NumPy arrays: what
// a trainer or evaluator program reads first. Row i of every array is the
// same example, in the order the builtin trainer and evaluator use.
type NPYSchema struct {
	Format  string   `json:"format"`  // "npy"
	Version int      `json:"version"` // 1
	Rows    int      `json:"rows"`
	Label   string   `json:"label"`  // the table's label column; label.npy: float32 [rows], 0 or 1
	Dense   []string `json:"dense"`  // dense.npy: float32 [rows, len(dense)], NaN = missing
	Sparse  []string `json:"sparse"` // sparse.NAME.values.npy int64 [nnz] and sparse.NAME.offsets.npy int64 [rows+1]
	// Slice is the column keying per-slice metrics ("" for none);
	// slice.npy holds int32 indexes into Slices, -1 for no value.
	Slice  string   `json:"slice,omitempty"`
	Slices []string `json:"slices,omitempty"`
	// Files lists every array file with its dtype and shape.
	Files map[string]NPYFile `json:"files"`
}

// NPYFile describes one array file.
type NPYFile struct {
	Dtype string `json:"dtype"`
	Shape []int  `json:"shape"`
}

// NPYSchemaFile is the schema's file name in the folder.
const NPYSchemaFile = "schema.json"

// WriteNPY writes the dataset into dir as NumPy arrays plus schema.json
// (see NPYSchema), with schema's dense and sparse features: dense features as one float32 matrix, each sparse
// feature's ids (raw, as int64; list features hold several per row) as
// values and offsets in the layout of torch.nn.EmbeddingBag, labels as
// float32, and date (int32 days since 1970-01-01), request id (int64)
// and slice (int32 codes) columns where the split has them.
func (d *Data) WriteNPY(dir string, schema Schema) (NPYSchema, error) {
	n := d.Len()
	dense, sparse := schema.Dense(), schema.Sparse()
	s := NPYSchema{Format: "npy", Version: 1, Rows: n, Label: schema.Label, Dense: dense, Sparse: sparse, Files: map[string]NPYFile{}}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return s, err
	}
	write := func(name, dtype string, shape []int, w func(string) error) error {
		if err := w(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		s.Files[name] = NPYFile{Dtype: dtype, Shape: shape}
		return nil
	}
	if err := write("label.npy", "float32", []int{n}, func(p string) error { return npy.WriteFile(p, d.Label) }); err != nil {
		return s, err
	}
	x := make([]float32, n*len(dense))
	for j, name := range dense {
		col, ok := d.dense[name]
		if !ok {
			return s, fmt.Errorf("the data has no dense feature %s", name)
		}
		for i, v := range col {
			x[i*len(dense)+j] = v
		}
	}
	if err := write("dense.npy", "float32", []int{n, len(dense)}, func(p string) error { return npy.WriteFile(p, x, n, len(dense)) }); err != nil {
		return s, err
	}
	for _, name := range sparse {
		col, ok := d.ids[name]
		if !ok {
			return s, fmt.Errorf("the data has no sparse feature %s", name)
		}
		offsets := make([]int64, n+1)
		var values []int64
		for i, ids := range col {
			for _, id := range ids {
				values = append(values, int64(id))
			}
			offsets[i+1] = int64(len(values))
		}
		if values == nil {
			values = []int64{}
		}
		if err := write("sparse."+name+".values.npy", "int64", []int{len(values)}, func(p string) error { return npy.WriteFile(p, values) }); err != nil {
			return s, err
		}
		if err := write("sparse."+name+".offsets.npy", "int64", []int{n + 1}, func(p string) error { return npy.WriteFile(p, offsets) }); err != nil {
			return s, err
		}
	}
	if err := write("date.npy", "int32", []int{n}, func(p string) error { return npy.WriteFile(p, d.Date) }); err != nil {
		return s, err
	}
	if d.RequestID != nil {
		if err := write("request_id.npy", "int64", []int{n}, func(p string) error { return npy.WriteFile(p, d.RequestID) }); err != nil {
			return s, err
		}
	}
	if d.Slice != nil {
		codes := make([]int32, n)
		index := map[string]int32{}
		for i, v := range d.Slice {
			if v == "" {
				codes[i] = -1
				continue
			}
			c, ok := index[v]
			if !ok {
				c = int32(len(s.Slices))
				index[v] = c
				s.Slices = append(s.Slices, v)
			}
			codes[i] = c
		}
		s.Slice = schema.Slice
		if err := write("slice.npy", "int32", []int{n}, func(p string) error { return npy.WriteFile(p, codes) }); err != nil {
			return s, err
		}
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return s, err
	}
	return s, os.WriteFile(filepath.Join(dir, NPYSchemaFile), append(b, '\n'), 0o644)
}
