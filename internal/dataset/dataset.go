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
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
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
