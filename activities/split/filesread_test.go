package split

import (
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/retrain-ml/retrain/internal/backfill"
)

// TestToDate32: timestamps give their UTC day (before 1970 too), strings
// must be YYYY-MM-DD, nulls stay null, other types are refused.
func TestToDate32(t *testing.T) {
	ts := array.NewTimestampBuilder(memory.DefaultAllocator, &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"})
	for _, s := range []string{"2026-11-05T23:59:59Z", "2026-11-06T00:00:00Z", "1969-12-31T12:00:00Z"} {
		tm, _ := time.Parse(time.RFC3339, s)
		ts.Append(arrow.Timestamp(tm.UnixMicro()))
	}
	ts.AppendNull()
	got, err := toDate32(ts.NewArray(), time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	d := got.(*array.Date32)
	for i, want := range []string{"2026-11-05", "2026-11-06", "1969-12-31"} {
		if s := backfill.Day(d.Value(i)).String(); s != want {
			t.Errorf("row %d: %s, want %s", i, s, want)
		}
	}
	if !d.IsNull(3) {
		t.Error("a null timestamp is not a null date")
	}
	sb := array.NewStringBuilder(memory.DefaultAllocator)
	sb.AppendValues([]string{"2026-11-05", "11/05/2026"}, nil)
	if _, err := toDate32(sb.NewArray(), time.UTC); err == nil || err.Error() != `row 1: "11/05/2026" is not a YYYY-MM-DD date` {
		t.Errorf("bad string: %v", err)
	}
	if err := dateType(arrow.PrimitiveTypes.Int64); err == nil {
		t.Error("int64 date column accepted")
	}
}
