package checkpoint_test

import (
	"slices"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/retrain-ml/retrain/internal/checkpoint"
)

// TestColumnsOf: columns come in schema order, not by name, and a list
// column is reported by its own name with its element type, not as the
// leaf Parquet calls "element".
func TestColumnsOf(t *testing.T) {
	type ad struct {
		ID    int64  `parquet:"id"`
		Topic string `parquet:"topic"`
	}
	type row struct {
		UserID     int64            `parquet:"user_id"`
		RecentAds  []int64          `parquet:"u_recent_ads,list"`
		Legacy     []int32          `parquet:"legacy"` // a repeated leaf, no LIST annotation
		CTR        *float64         `parquet:"ctr,optional"`
		Day        int32            `parquet:"day,date"`
		Name       string           `parquet:"name"`
		Flag       bool             `parquet:"flag"`
		Counts     map[string]int64 `parquet:"counts"`
		Ad         ad               `parquet:"ad"`
		RecentTags []string         `parquet:"a_tags,list"`
	}
	got := checkpoint.ColumnsOf(parquet.SchemaOf(new(row)))
	want := []checkpoint.Column{
		{"user_id", "int64"},
		{"u_recent_ads", "list<int64>"},
		{"legacy", "list<int32>"},
		{"ctr", "double"},
		{"day", "date"},
		{"name", "string"},
		{"flag", "boolean"},
		{"counts", "map<string,int64>"},
		{"ad", "struct<id:int64,topic:string>"},
		{"a_tags", "list<string>"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ColumnsOf =\n%v\nwant\n%v", got, want)
	}
	if s := got[1].String(); s != "u_recent_ads:list<int64>" {
		t.Fatalf("String() = %q", s)
	}
}
