package dataset

import (
	"bytes"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/parquet-go/parquet-go"
)

var tableSchema = arrow.NewSchema([]arrow.Field{
	{Name: "request_id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "user_id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "date", Type: arrow.FixedWidthTypes.Date32},
	{Name: "label", Type: arrow.PrimitiveTypes.Int32},
	{Name: "activity", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "recent", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64), Nullable: true},
	{Name: "name", Type: arrow.BinaryTypes.String},
}, nil)

// record builds rows (request id, user, date, label, activity or NaN for
// null, recent ads) in arrow.
func record(t *testing.T) arrow.RecordBatch {
	t.Helper()
	b := array.NewRecordBuilder(memory.NewGoAllocator(), tableSchema)
	defer b.Release()
	type row struct {
		id, user int64
		date     int32
		label    int32
		act      float64
		recent   []int64
		name     string
	}
	rows := []row{
		{3, 7, 100, 1, 0.5, []int64{1, 2}, "c"},
		{1, 8, 100, 0, math.NaN(), nil, "a"},
		{2, 7, 101, 0, 2, []int64{}, "b"},
	}
	for _, r := range rows {
		b.Field(0).(*array.Int64Builder).Append(r.id)
		b.Field(1).(*array.Int64Builder).Append(r.user)
		b.Field(2).(*array.Date32Builder).Append(arrow.Date32(r.date))
		b.Field(3).(*array.Int32Builder).Append(r.label)
		if math.IsNaN(r.act) {
			b.Field(4).(*array.Float64Builder).AppendNull()
		} else {
			b.Field(4).(*array.Float64Builder).Append(r.act)
		}
		lb := b.Field(5).(*array.ListBuilder)
		if r.recent == nil {
			lb.AppendNull()
		} else {
			lb.Append(true)
			lb.ValueBuilder().(*array.Int64Builder).AppendValues(r.recent, nil)
		}
		b.Field(6).(*array.StringBuilder).Append(r.name)
	}
	return b.NewRecordBatch()
}

func TestInferRejectsBadColumns(t *testing.T) {
	tests := []struct {
		name          string
		dense, sparse []string
		label, slice  string
		want          string
	}{
		{"missing dense", []string{"nope"}, nil, "label", "", `"nope" is not in the table`},
		{"string as dense", []string{"name"}, nil, "label", "", `dense feature "name" is utf8`},
		{"float as id", nil, []string{"activity"}, "label", "", `sparse feature "activity"`},
		{"no features", nil, nil, "label", "", "no feature columns"},
		{"twice", []string{"activity"}, []string{"activity"}, "label", "", "listed twice"},
		{"label is a feature", []string{"activity"}, []string{"label"}, "label", "", "cannot be a feature"},
		{"missing label", []string{"activity"}, nil, "clicked", "", "label"},
		{"missing slice", []string{"activity"}, nil, "label", "country", "slice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Infer(tableSchema, tt.label, "date", "request_id", tt.dense, tt.sparse, tt.slice)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one about %q", err, tt.want)
			}
		})
	}
}

// TestRoundTrip converts arrow rows to split rows, writes them as Parquet
// the way the split node does, reads them back as any trainer would and
// builds examples.
func TestRoundTrip(t *testing.T) {
	s, err := Infer(tableSchema, "label", "date", "request_id", []string{"activity"}, []string{"user_id", "recent"}, "name")
	if err != nil {
		t.Fatal(err)
	}
	rec := record(t)
	defer rec.Release()
	rows, err := NewConverter(s).Rows(rec)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || rows[0].Date != 100 || rows[2].Date != 101 {
		t.Fatalf("rows %+v", rows)
	}

	pq := parquet.SchemaOf(reflect.New(s.RowType()).Interface())
	var names []string
	for _, f := range pq.Fields() {
		names = append(names, f.Name())
	}
	if want := []string{"request_id", "date", "label", "activity", "user_id", "recent", "slice_key"}; !reflect.DeepEqual(names, want) {
		t.Errorf("Parquet columns %v, want %v:\n%s", names, want, pq)
	}
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[any](&buf, pq)
	vals := make([]any, len(rows))
	for i, r := range rows {
		vals[i] = r.Value
	}
	if _, err := w.Write(vals); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := parquet.OpenFile(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	r := parquet.NewGenericReader[any](f)
	back := make([]any, 3)
	if n, _ := r.Read(back); n != 3 {
		t.Fatalf("read %d rows", n)
	}

	d, err := Load(s, back)
	if err != nil {
		t.Fatal(err)
	}
	// Sorted by request id, whatever the order read.
	if got := d.RequestID; !reflect.DeepEqual(got, []int64{1, 2, 3}) {
		t.Fatalf("request ids %v", got)
	}
	if !reflect.DeepEqual(d.Slice, []string{"a", "b", "c"}) || !reflect.DeepEqual(d.Label, []float32{0, 0, 1}) {
		t.Fatalf("slices %v labels %v", d.Slice, d.Label)
	}
	exs, err := d.Examples([]string{"activity"}, []string{"user_id", "recent"})
	if err != nil {
		t.Fatal(err)
	}
	if !math.IsNaN(float64(exs[0].Dense[0])) || exs[1].Dense[0] != 2 || exs[2].Dense[0] != 0.5 {
		t.Errorf("dense %v %v %v: a null must read as NaN (missing)", exs[0].Dense, exs[1].Dense, exs[2].Dense)
	}
	if !reflect.DeepEqual(exs[2].Sparse, [][]uint64{{7}, {1, 2}}) || len(exs[0].Sparse[1]) != 0 {
		t.Errorf("sparse %v %v", exs[2].Sparse, exs[0].Sparse)
	}
	// A model may use fewer features than the data has, never more.
	if _, err := d.Examples(nil, []string{"user_id"}); err != nil {
		t.Error(err)
	}
	if _, err := d.Examples([]string{"ad_quality"}, nil); err == nil || !strings.Contains(err.Error(), "ad_quality") {
		t.Errorf("missing feature: %v", err)
	}
}

func TestEvalDates(t *testing.T) {
	dates := []int32{5, 3, 4, 3, 6}
	tests := []struct {
		name    string
		days    int
		from    int32
		hasFrom bool
		want    []int32
		wantErr string
	}{
		{"last day by default", 0, 0, false, []int32{6}, ""},
		{"last two", 2, 0, false, []int32{5, 6}, ""},
		{"from a date", 0, 5, true, []int32{5, 6}, ""},
		{"all held out", 4, 0, false, nil, "nothing to train on"},
		{"from after the data", 0, 9, true, nil, "no date is held out"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := EvalDates(dates, tt.days, tt.from, tt.hasFrom)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for _, d := range tt.want {
				if !got[d] {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
	if _, err := EvalDates([]int32{1, 1}, 1, 0, false); err == nil {
		t.Error("one date split")
	}
}
