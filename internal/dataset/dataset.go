// Package dataset turns rows of a training table into the examples a
// trainer learns from, and back: it defines the layout of a train/eval
// split (plain named Parquet columns, so any trainer program can read it),
// converts Arrow record batches of the lake into rows of that layout, and
// loads a split into columns from which a [trainer.Example] slice is built
// for any model's feature list.
//
// It does no I/O: the split and train nodes read and write the bytes.
//
// # Layout of a split
//
// One row per training example, with these Parquet columns:
//
//	request_id  int64             the example's key, when the table has one
//	date        int32             days since 1970-01-01 (Parquet DATE)
//	label       float             the click, 0 or 1
//	<dense>     optional double   one per dense feature; null = missing
//	<id>        optional int64    one per scalar id feature (user_id, ad_id)
//	<list>      list<int64>       one per list id feature (recently clicked ads)
//	slice_key   optional string   the value of the slice column, for per-slice metrics
//
// A program such as examples/torch/train.py reads it as any Parquet data
// set: numeric columns are features, list<int> columns are id lists.
package dataset

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/retrain-ml/retrain/internal/trainer"
)

// Fixed column names of a split.
const (
	ColRequestID = "request_id"
	ColDate      = "date"
	ColLabel     = "label"
	ColSlice     = "slice_key"
)

// Kind is how a feature column is stored.
type Kind string

// Kinds of feature columns.
const (
	Dense  Kind = "dense" // a number; null is missing
	ID     Kind = "id"    // one integer id; null is no id
	IDList Kind = "list"  // a list of integer ids
)

// Column is one feature column of a split.
type Column struct {
	Name string `json:"name"`
	Kind Kind   `json:"kind"`
}

// Schema is the layout of a split: which table columns became which split
// columns.
type Schema struct {
	// Label is the table's label column (a 0/1 integer, boolean or number).
	Label string `json:"label"`
	// Date is the table's date column; DATE or an integer day number.
	Date string `json:"date"`
	// RequestID is the key column ("" when the table has none).
	RequestID string   `json:"request_id,omitempty"`
	Columns   []Column `json:"columns"`
	// Slice is the table column whose value keys per-slice metrics ("" for
	// none). It may also be a feature or the date.
	Slice string `json:"slice,omitempty"`
}

// Dense returns the names of the dense columns, in order.
func (s Schema) Dense() []string { return s.names(Dense) }

// Sparse returns the names of the id and id-list columns, in order.
func (s Schema) Sparse() []string {
	var out []string
	for _, c := range s.Columns {
		if c.Kind == ID || c.Kind == IDList {
			out = append(out, c.Name)
		}
	}
	return out
}

func (s Schema) names(k Kind) []string {
	var out []string
	for _, c := range s.Columns {
		if c.Kind == k {
			out = append(out, c.Name)
		}
	}
	return out
}

// TableColumns returns the table columns a scan must read, without
// duplicates.
func (s Schema) TableColumns() []string {
	cols := []string{s.Date, s.Label}
	if s.RequestID != "" {
		cols = append(cols, s.RequestID)
	}
	for _, c := range s.Columns {
		cols = append(cols, c.Name)
	}
	if s.Slice != "" {
		cols = append(cols, s.Slice)
	}
	var out []string
	for _, c := range cols {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// Infer builds a split schema from an Arrow schema of the table: dense
// names numeric columns, sparse names integer or integer-list columns. It
// fails, naming the column, when one is missing or of a type that cannot
// serve.
func Infer(as *arrow.Schema, label, date, requestID string, dense, sparse []string, slice string) (Schema, error) {
	s := Schema{Label: label, Date: date, Slice: slice}
	field := func(name string) (arrow.Field, error) {
		fs, ok := as.FieldsByName(name)
		if !ok || len(fs) == 0 {
			return arrow.Field{}, fmt.Errorf("column %q is not in the table", name)
		}
		return fs[0], nil
	}
	var errs []error
	if f, err := field(label); err != nil {
		errs = append(errs, fmt.Errorf("label: %w", err))
	} else if !isNumber(f.Type) && f.Type.ID() != arrow.BOOL {
		errs = append(errs, fmt.Errorf("label column %q is %s, want a number or boolean", label, f.Type))
	}
	if f, err := field(date); err != nil {
		errs = append(errs, fmt.Errorf("date: %w", err))
	} else if f.Type.ID() != arrow.DATE32 && !isInteger(f.Type) {
		errs = append(errs, fmt.Errorf("date column %q is %s, want a date", date, f.Type))
	}
	if requestID != "" {
		if f, err := field(requestID); err == nil && isInteger(f.Type) {
			s.RequestID = requestID
		}
	}
	seen := map[string]bool{}
	for _, name := range dense {
		f, err := field(name)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("dense feature: %w", err))
		case !isNumber(f.Type):
			errs = append(errs, fmt.Errorf("dense feature %q is %s, want a number", name, f.Type))
		case seen[name]:
			errs = append(errs, fmt.Errorf("feature %q listed twice", name))
		default:
			s.Columns = append(s.Columns, Column{Name: name, Kind: Dense})
		}
		seen[name] = true
	}
	for _, name := range sparse {
		f, err := field(name)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("sparse feature: %w", err))
		case seen[name]:
			errs = append(errs, fmt.Errorf("feature %q listed twice", name))
		case isInteger(f.Type):
			s.Columns = append(s.Columns, Column{Name: name, Kind: ID})
		case isIntList(f.Type):
			s.Columns = append(s.Columns, Column{Name: name, Kind: IDList})
		default:
			errs = append(errs, fmt.Errorf("sparse feature %q is %s, want an integer id or a list of them", name, f.Type))
		}
		seen[name] = true
	}
	for _, name := range []string{label, date, s.RequestID, ColSlice} {
		if name != "" && slices.ContainsFunc(s.Columns, func(c Column) bool { return c.Name == name }) {
			errs = append(errs, fmt.Errorf("column %q cannot be a feature: it is the split's %s", name, name))
		}
	}
	if slice != "" {
		if _, err := field(slice); err != nil {
			errs = append(errs, fmt.Errorf("slice: %w", err))
		}
	}
	if len(s.Columns) == 0 {
		errs = append(errs, errors.New("no feature columns: give dense and/or sparse"))
	}
	return s, errors.Join(errs...)
}

func isInteger(t arrow.DataType) bool {
	switch t.ID() {
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64, arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64:
		return true
	}
	return false
}

func isNumber(t arrow.DataType) bool {
	switch t.ID() {
	case arrow.FLOAT32, arrow.FLOAT64:
		return true
	}
	return isInteger(t)
}

func isIntList(t arrow.DataType) bool {
	switch lt := t.(type) {
	case *arrow.ListType:
		return isInteger(lt.Elem())
	case *arrow.LargeListType:
		return isInteger(lt.Elem())
	}
	return false
}

// RowType is the Go type of a split row for s, built at run time so that
// parquet-go writes one named column per feature. Write values of it (from
// [Converter.Rows]) with a writer of schema parquet.SchemaOf(reflect.New(t).Interface()).
func (s Schema) RowType() reflect.Type {
	fields := []reflect.StructField{}
	add := func(name string, typ reflect.Type, opts string) {
		tag := `parquet:"` + name + opts + `"`
		fields = append(fields, reflect.StructField{Name: "F" + strconv.Itoa(len(fields)), Type: typ, Tag: reflect.StructTag(tag)})
	}
	if s.RequestID != "" {
		add(ColRequestID, reflect.TypeFor[int64](), "")
	}
	add(ColDate, reflect.TypeFor[int32](), ",date")
	add(ColLabel, reflect.TypeFor[float32](), "")
	for _, c := range s.Columns {
		switch c.Kind {
		case Dense:
			add(c.Name, reflect.TypeFor[*float64](), ",optional")
		case ID:
			add(c.Name, reflect.TypeFor[*int64](), ",optional")
		case IDList:
			add(c.Name, reflect.TypeFor[[]int64](), ",list")
		}
	}
	if s.Slice != "" {
		add(ColSlice, reflect.TypeFor[*string](), ",optional")
	}
	return reflect.StructOf(fields)
}

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

// EvalDates picks the held-out dates: the last evalDays distinct dates,
// or every date >= from when from is set (a day number; 0 means unset).
// At least one date stays for training.
func EvalDates(dates []int32, evalDays int, from int32, hasFrom bool) (map[int32]bool, error) {
	ds := slices.Clone(dates)
	slices.Sort(ds)
	ds = slices.Compact(ds)
	if len(ds) < 2 {
		return nil, fmt.Errorf("%d distinct date(s) with rows: a train/eval split needs at least 2", len(ds))
	}
	eval := map[int32]bool{}
	if hasFrom {
		for _, d := range ds {
			if d >= from {
				eval[d] = true
			}
		}
	} else {
		if evalDays < 1 {
			evalDays = 1
		}
		for _, d := range ds[max(len(ds)-evalDays, 0):] {
			eval[d] = true
		}
	}
	switch {
	case len(eval) == 0:
		return nil, fmt.Errorf("no date is held out (dates run to %d)", ds[len(ds)-1])
	case len(eval) == len(ds):
		return nil, errors.New("every date would be held out, leaving nothing to train on")
	}
	return eval, nil
}

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
