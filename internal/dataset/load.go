package dataset

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/retrain-ml/retrain/internal/trainer"
)

// Data is a split dataset loaded into columns, in request id order (or
// read order without one), so that what is built from it does not depend
// on the order the lake returned rows in.
type Data struct {
	RequestID []int64
	Date      []int32
	Label     []float32
	Slice     []string
	dense     map[string][]float32 // NaN = missing
	ids       map[string][][]uint64
}

// Len returns the number of rows.
func (d *Data) Len() int { return len(d.Label) }

// Load builds Data from rows as parquet-go reads them into map[string]any.
func Load(s Schema, rows []any) (*Data, error) {
	d, err := LoadBatch(s, rows)
	if err != nil {
		return nil, err
	}
	if d.RequestID != nil {
		d.sortByRequest()
	}
	return d, nil
}

// LoadBatch is Load without the sort: one batch of a dataset streamed in
// file order, for code that must not hold the whole dataset (a
// [SpillSource] restores the request id order chunk by chunk).
func LoadBatch(s Schema, rows []any) (*Data, error) {
	d := &Data{dense: map[string][]float32{}, ids: map[string][][]uint64{}}
	n := len(rows)
	if s.RequestID != "" {
		d.RequestID = make([]int64, n)
	}
	d.Date = make([]int32, n)
	d.Label = make([]float32, n)
	if s.Slice != "" {
		d.Slice = make([]string, n)
	}
	for _, c := range s.Columns {
		if c.Kind == Dense {
			d.dense[c.Name] = make([]float32, n)
		} else {
			d.ids[c.Name] = make([][]uint64, n)
		}
	}
	for i, r := range rows {
		m, ok := r.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("row %d: got %T, want a map", i, r)
		}
		if d.RequestID != nil {
			d.RequestID[i], _ = anyInt(m[ColRequestID])
		}
		day, _ := anyInt(m[ColDate])
		d.Date[i] = int32(day)
		y, ok := anyFloat(m[ColLabel])
		if !ok {
			return nil, fmt.Errorf("row %d: no label", i)
		}
		d.Label[i] = float32(y)
		if d.Slice != nil {
			if v, ok := m[ColSlice].(string); ok {
				d.Slice[i] = v
			}
		}
		for _, c := range s.Columns {
			v := m[c.Name]
			switch c.Kind {
			case Dense:
				x, ok := anyFloat(v)
				if !ok {
					x = math.NaN()
				}
				d.dense[c.Name][i] = float32(x)
			case ID:
				if x, ok := anyInt(v); ok {
					d.ids[c.Name][i] = []uint64{uint64(x)}
				}
			case IDList:
				d.ids[c.Name][i] = anyInts(v)
			}
		}
	}
	return d, nil
}

func (d *Data) sortByRequest() {
	perm := make([]int, d.Len())
	for i := range perm {
		perm[i] = i
	}
	slices.SortStableFunc(perm, func(a, b int) int { return cmp.Compare(d.RequestID[a], d.RequestID[b]) })
	d.RequestID = permute(d.RequestID, perm)
	d.Date = permute(d.Date, perm)
	d.Label = permute(d.Label, perm)
	if d.Slice != nil {
		d.Slice = permute(d.Slice, perm)
	}
	for k, v := range d.dense {
		d.dense[k] = permute(v, perm)
	}
	for k, v := range d.ids {
		d.ids[k] = permute(v, perm)
	}
}

func permute[T any](s []T, perm []int) []T {
	out := make([]T, len(s))
	for i, j := range perm {
		out[i] = s[j]
	}
	return out
}

// Examples builds the examples of a model with the given features. Every
// feature the model names must be in the data; the model may use fewer
// than the data has (a production model trained before a feature existed).
func (d *Data) Examples(dense, sparse []string) ([]trainer.Example, error) {
	var missing []string
	denseCols := make([][]float32, len(dense))
	for i, name := range dense {
		c, ok := d.dense[name]
		if !ok {
			missing = append(missing, name)
		}
		denseCols[i] = c
	}
	idCols := make([][][]uint64, len(sparse))
	for i, name := range sparse {
		c, ok := d.ids[name]
		if !ok {
			missing = append(missing, name)
		}
		idCols[i] = c
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("the data has no feature %v", missing)
	}
	n := d.Len()
	exs := make([]trainer.Example, n)
	flat := make([]float32, n*len(dense))
	for i := range exs {
		x := flat[i*len(dense) : (i+1)*len(dense) : (i+1)*len(dense)]
		for j, c := range denseCols {
			x[j] = c[i]
		}
		sp := make([][]uint64, len(sparse))
		for j, c := range idCols {
			sp[j] = c[i]
		}
		exs[i] = trainer.Example{Dense: x, Sparse: sp, Label: d.Label[i]}
	}
	return exs, nil
}

func anyInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int32:
		return int64(x), true
	case int:
		return int64(x), true
	case uint64:
		return int64(x), true
	case float64:
		return int64(x), true
	}
	return 0, false
}

func anyFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	}
	i, ok := anyInt(v)
	return float64(i), ok
}

func anyInts(v any) []uint64 {
	switch x := v.(type) {
	case []int64:
		out := make([]uint64, len(x))
		for i, id := range x {
			out[i] = uint64(id)
		}
		return out
	case []any:
		out := make([]uint64, 0, len(x))
		for _, e := range x {
			if id, ok := anyInt(e); ok {
				out = append(out, uint64(id))
			}
		}
		return out
	}
	return nil
}
