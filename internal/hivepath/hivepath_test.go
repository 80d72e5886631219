package hivepath

import (
	"reflect"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

func TestParts(t *testing.T) {
	got := Parts("/data/clicks/date=2026-11-21/region=eu%2Fwest/part-0.parquet")
	want := []Part{{"date", "2026-11-21"}, {"region", "eu/west"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Parts = %v, want %v", got, want)
	}
	if got := Parts("date=2026-11-21.parquet"); len(got) != 0 {
		t.Errorf("a file's own name is not a folder: %v", got)
	}
	if got := Parts("/a/=x/k=/part.parquet"); len(got) != 0 {
		t.Errorf("empty keys or values are no partition: %v", got)
	}
	if v, ok := Value(want, "region"); !ok || v != "eu/west" {
		t.Errorf("Value(region) = %q, %v", v, ok)
	}
}

func TestColumn(t *testing.T) {
	f := Field("date", "date")
	if f.Type.ID() != arrow.DATE32 {
		t.Fatalf("the date column's folder reads as %v", f.Type)
	}
	a, err := Column(f, "2026-11-21", 3)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	if d := a.(*array.Date32).Value(2); d.ToTime().Format("2006-01-02") != "2026-11-21" || a.Len() != 3 {
		t.Errorf("date column %v", a)
	}
	if _, err := Column(f, "yesterday", 1); err == nil {
		t.Error("a date folder that is no date was read")
	}
	s, err := Column(Field("region", "date"), "eu", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	if s.(*array.String).Value(1) != "eu" {
		t.Errorf("string column %v", s)
	}
}
