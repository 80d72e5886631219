package dataset

import (
	"fmt"
	"math"
	"reflect"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Converter turns Arrow record batches of the table into split rows.
type Converter struct {
	s   Schema
	typ reflect.Type
}

// NewConverter returns a converter for s.
func NewConverter(s Schema) *Converter { return &Converter{s: s, typ: s.RowType()} }

// Row is one converted row with the date it belongs to, for splitting.
type Row struct {
	Date  int32
	Value any // a value of the schema's RowType
	// nulls has bit i set when feature column i (of Schema.Columns) is
	// null in this row; nil when none is. [Coverage] counts them.
	nulls []uint64
}

// Null reports whether feature column i (of Schema.Columns) is null.
func (r Row) Null(i int) bool {
	return i/64 < len(r.nulls) && r.nulls[i/64]&(1<<(i%64)) != 0
}

// Rows converts a record batch. Rows whose label is null are dropped (an
// unlabelled impression teaches nothing), as are rows with a null date.
func (c *Converter) Rows(rec arrow.RecordBatch) ([]Row, error) {
	col := func(name string) (arrow.Array, error) {
		idx := rec.Schema().FieldIndices(name)
		if len(idx) == 0 {
			return nil, fmt.Errorf("column %q missing from the scan", name)
		}
		return rec.Column(idx[0]), nil
	}
	dateCol, err := col(c.s.Date)
	if err != nil {
		return nil, err
	}
	labelCol, err := col(c.s.Label)
	if err != nil {
		return nil, err
	}
	var reqCol, sliceCol arrow.Array
	if c.s.RequestID != "" {
		if reqCol, err = col(c.s.RequestID); err != nil {
			return nil, err
		}
	}
	if c.s.Slice != "" {
		if sliceCol, err = col(c.s.Slice); err != nil {
			return nil, err
		}
	}
	feats := make([]arrow.Array, len(c.s.Columns))
	for i, fc := range c.s.Columns {
		if feats[i], err = col(fc.Name); err != nil {
			return nil, err
		}
	}
	n := int(rec.NumRows())
	out := make([]Row, 0, n)
	for i := range n {
		if dateCol.IsNull(i) || labelCol.IsNull(i) {
			continue
		}
		v := reflect.New(c.typ).Elem()
		f := 0
		if reqCol != nil {
			id, ok := intAt(reqCol, i)
			if !ok {
				continue
			}
			v.Field(f).SetInt(id)
			f++
		}
		day, _ := intAt(dateCol, i)
		v.Field(f).SetInt(day)
		f++
		y, _ := floatAt(labelCol, i)
		v.Field(f).SetFloat(y)
		f++
		var nulls []uint64
		for j, fc := range c.s.Columns {
			a := feats[j]
			null := true
			switch fc.Kind {
			case Dense:
				if x, ok := floatAt(a, i); ok && !math.IsNaN(x) {
					v.Field(f).Set(reflect.ValueOf(&x))
					null = false
				}
			case ID:
				if x, ok := intAt(a, i); ok {
					v.Field(f).Set(reflect.ValueOf(&x))
					null = false
				}
			case IDList:
				// A null list is written as an empty one (the trainer
				// sees no ids either way) but counted as missing: an
				// empty list is a value, a null is a join that found
				// nothing.
				null = a.IsNull(i)
				v.Field(f).Set(reflect.ValueOf(intsAt(a, i)))
			}
			if null {
				if nulls == nil {
					nulls = make([]uint64, (len(c.s.Columns)+63)/64)
				}
				nulls[j/64] |= 1 << (j % 64)
			}
			f++
		}
		if sliceCol != nil {
			if !sliceCol.IsNull(i) {
				s := sliceCol.ValueStr(i)
				v.Field(f).Set(reflect.ValueOf(&s))
			}
		}
		out = append(out, Row{Date: int32(day), Value: v.Interface(), nulls: nulls})
	}
	return out, nil
}

func intAt(a arrow.Array, i int) (int64, bool) {
	if a.IsNull(i) {
		return 0, false
	}
	switch a := a.(type) {
	case *array.Int64:
		return a.Value(i), true
	case *array.Int32:
		return int64(a.Value(i)), true
	case *array.Int16:
		return int64(a.Value(i)), true
	case *array.Int8:
		return int64(a.Value(i)), true
	case *array.Uint64:
		return int64(a.Value(i)), true
	case *array.Uint32:
		return int64(a.Value(i)), true
	case *array.Uint16:
		return int64(a.Value(i)), true
	case *array.Uint8:
		return int64(a.Value(i)), true
	case *array.Date32:
		return int64(a.Value(i)), true
	}
	return 0, false
}

func floatAt(a arrow.Array, i int) (float64, bool) {
	if a.IsNull(i) {
		return 0, false
	}
	switch a := a.(type) {
	case *array.Float64:
		return a.Value(i), true
	case *array.Float32:
		return float64(a.Value(i)), true
	case *array.Boolean:
		if a.Value(i) {
			return 1, true
		}
		return 0, true
	}
	x, ok := intAt(a, i)
	return float64(x), ok
}

func intsAt(a arrow.Array, i int) []int64 {
	if a.IsNull(i) {
		return []int64{}
	}
	var (
		vals       arrow.Array
		start, end int64
	)
	switch l := a.(type) {
	case *array.List:
		s, e := l.ValueOffsets(i)
		vals, start, end = l.ListValues(), s, e
	case *array.LargeList:
		s, e := l.ValueOffsets(i)
		vals, start, end = l.ListValues(), s, e
	default:
		return []int64{}
	}
	out := make([]int64, 0, end-start)
	for j := start; j < end; j++ {
		if x, ok := intAt(vals, int(j)); ok {
			out = append(out, x)
		}
	}
	return out
}

// Dates returns the non-null values of a record's date column as day
// numbers.
func Dates(rec arrow.RecordBatch, col string) ([]int32, error) {
	idx := rec.Schema().FieldIndices(col)
	if len(idx) == 0 {
		return nil, fmt.Errorf("column %q missing from the scan", col)
	}
	a := rec.Column(idx[0])
	out := make([]int32, 0, a.Len())
	for i := range a.Len() {
		if d, ok := intAt(a, i); ok {
			out = append(out, int32(d))
		}
	}
	return out, nil
}
