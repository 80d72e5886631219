package dataset

import (
	"fmt"
	"math"

	"github.com/parquet-go/parquet-go"
)

// LoadRows is LoadBatch for rows read as parquet.Row values of a split
// file whose schema is ps: it fills the columns straight from the values,
// without building a map per row, which is most of what LoadBatch costs
// (the maps' allocations and their collection). A column of s that the
// file lacks reads as missing in every row, as in LoadBatch.
func LoadRows(s Schema, ps *parquet.Schema, rows []parquet.Row) (*Data, error) {
	plan := planRows(s, ps)
	n := len(rows)
	d := &Data{dense: map[string][]float32{}, ids: map[string][][]uint64{}}
	if s.RequestID != "" {
		d.RequestID = make([]int64, n)
	}
	d.Date = make([]int32, n)
	d.Label = make([]float32, n)
	if s.Slice != "" {
		d.Slice = make([]string, n)
	}
	dense := make([][]float32, len(s.Columns))
	ids := make([][][]uint64, len(s.Columns))
	for j, c := range s.Columns {
		if c.Kind == Dense {
			col := make([]float32, n)
			for i := range col {
				col[i] = float32(math.NaN())
			}
			dense[j], d.dense[c.Name] = col, col
		} else {
			ids[j] = make([][]uint64, n)
			d.ids[c.Name] = ids[j]
		}
	}
	// The ids of a batch share one array: a slice per row, not an
	// allocation per row.
	slab := make([]uint64, 0, n)
	for i, row := range rows {
		labelled := false
		list, listStart := -1, 0 // the id-list column being collected
		endList := func() {
			if list >= 0 {
				ids[list][i] = slab[listStart:len(slab):len(slab)]
				list = -1
			}
		}
		for _, v := range row {
			c := v.Column()
			if c < 0 || c >= len(plan) {
				continue
			}
			for _, tg := range plan[c] {
				switch tg.role {
				case roleRequestID:
					d.RequestID[i], _ = valueInt(v)
				case roleDate:
					day, _ := valueInt(v)
					d.Date[i] = int32(day)
				case roleLabel:
					y, ok := valueFloat(v)
					if ok {
						d.Label[i], labelled = float32(y), true
					}
				case roleSlice:
					if v.Kind() == parquet.ByteArray {
						d.Slice[i] = string(v.ByteArray())
					}
				case roleDense:
					if x, ok := valueFloat(v); ok {
						dense[tg.col][i] = float32(x)
					}
				case roleID:
					if x, ok := valueInt(v); ok {
						slab = append(slab, uint64(x))
						ids[tg.col][i] = slab[len(slab)-1 : len(slab) : len(slab)]
					}
				case roleList:
					if list != tg.col {
						endList()
						list, listStart = tg.col, len(slab)
					}
					if x, ok := valueInt(v); ok {
						slab = append(slab, uint64(x))
					}
				}
			}
		}
		endList()
		if !labelled {
			return nil, fmt.Errorf("row %d: no label", i)
		}
	}
	return d, nil
}

type role uint8

const (
	roleRequestID role = iota
	roleDate
	roleLabel
	roleSlice
	roleDense
	roleID
	roleList
)

// target is what a leaf column of the file fills: a role, and for a
// feature its index in the Schema's columns.
type target struct {
	role role
	col  int
}

// planRows maps each leaf column of ps, by its top-level field name, to
// the columns of Data it fills (usually one; none for a column s does not
// name).
func planRows(s Schema, ps *parquet.Schema) [][]target {
	leaves := ps.Columns()
	plan := make([][]target, len(leaves))
	for c, path := range leaves {
		if len(path) == 0 {
			continue
		}
		name := path[0]
		var ts []target
		switch {
		case name == ColRequestID && s.RequestID != "":
			ts = append(ts, target{role: roleRequestID})
		case name == ColDate:
			ts = append(ts, target{role: roleDate})
		case name == ColLabel:
			ts = append(ts, target{role: roleLabel})
		case name == ColSlice && s.Slice != "":
			ts = append(ts, target{role: roleSlice})
		}
		for j, col := range s.Columns {
			if col.Name != name {
				continue
			}
			switch col.Kind {
			case Dense:
				ts = append(ts, target{role: roleDense, col: j})
			case ID:
				ts = append(ts, target{role: roleID, col: j})
			case IDList:
				ts = append(ts, target{role: roleList, col: j})
			}
		}
		plan[c] = ts
	}
	return plan
}

// valueInt is anyInt for a Parquet value: an integer, or a double
// truncated; null and other kinds are not integers.
func valueInt(v parquet.Value) (int64, bool) {
	switch v.Kind() {
	case parquet.Int32:
		return int64(v.Int32()), true
	case parquet.Int64:
		return v.Int64(), true
	case parquet.Double:
		return int64(v.Double()), true
	}
	return 0, false
}

// valueFloat is anyFloat for a Parquet value.
func valueFloat(v parquet.Value) (float64, bool) {
	switch v.Kind() {
	case parquet.Float:
		return float64(v.Float()), true
	case parquet.Double:
		return v.Double(), true
	}
	i, ok := valueInt(v)
	return float64(i), ok
}

// Combine joins the batches of one dataset, in order, into what Load
// returns for their rows together: sorted by request id when the rows
// have one.
func Combine(s Schema, parts []*Data) *Data {
	if len(parts) == 0 {
		d, _ := LoadBatch(s, nil) // no rows cannot fail
		return d
	}
	d := &Data{dense: map[string][]float32{}, ids: map[string][][]uint64{}}
	first := parts[0]
	for _, p := range parts {
		if first.RequestID != nil {
			d.RequestID = append(d.RequestID, p.RequestID...)
		}
		d.Date = append(d.Date, p.Date...)
		d.Label = append(d.Label, p.Label...)
		if first.Slice != nil {
			d.Slice = append(d.Slice, p.Slice...)
		}
		for k := range first.dense {
			d.dense[k] = append(d.dense[k], p.dense[k]...)
		}
		for k := range first.ids {
			d.ids[k] = append(d.ids[k], p.ids[k]...)
		}
	}
	if d.RequestID != nil {
		d.sortByRequest()
	}
	return d
}
