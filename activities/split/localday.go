package split

import (
	"fmt"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/internal/backfill"
)

// splitZone is the time zone a split takes days in: its own timezone,
// else the schedule's that started the run, else UTC.
func splitZone(w With, runZone string) (*time.Location, error) {
	name := w.Timezone
	if name == "" {
		name = runZone
	}
	if name == "" {
		return time.UTC, nil
	}
	if err := dags.CheckTimezone(name); err != nil {
		return nil, fmt.Errorf("timezone: %w", err)
	}
	return time.LoadLocation(name)
}

// zoneOf is the zone a timestamp column's values take their day in: a
// timestamp with a zone (an instant, UTC-adjusted in Parquet) its day in
// loc; one without (wall-clock time) the date it reads as.
func zoneOf(t *arrow.TimestampType, loc *time.Location) *time.Location {
	if t.TimeZone == "" {
		return time.UTC
	}
	return loc
}

// dayIn is the day in loc of timestamp v in unit.
func dayIn(v int64, unit arrow.TimeUnit, loc *time.Location) backfill.Day {
	if loc == time.UTC {
		return tsDay(v, unit)
	}
	y, m, d := arrow.Timestamp(v).ToTime(unit).In(loc).Date()
	return backfill.DayOf(time.Date(y, m, d, 0, 0, 0, 0, time.UTC))
}

// toDate32 converts a date64, timestamp or YYYY-MM-DD string column to
// days; a timestamp's day is taken in loc (see zoneOf).
func toDate32(a arrow.Array, loc *time.Location) (arrow.Array, error) {
	b := array.NewDate32Builder(memory.DefaultAllocator)
	defer b.Release()
	b.Reserve(a.Len())
	var tz *time.Location
	if ts, ok := a.DataType().(*arrow.TimestampType); ok {
		tz = zoneOf(ts, loc)
	}
	for i := range a.Len() {
		if a.IsNull(i) {
			b.AppendNull()
			continue
		}
		var d backfill.Day
		switch v := a.(type) {
		case *array.Date32:
			d = backfill.Day(v.Value(i))
		case *array.Date64:
			d = tsDay(int64(v.Value(i)), arrow.Millisecond)
		case *array.Timestamp:
			d = dayIn(int64(v.Value(i)), v.DataType().(*arrow.TimestampType).Unit, tz)
		case array.StringLike:
			var err error
			if d, err = backfill.ParseDay(v.ValueStr(i)); err != nil {
				return nil, fmt.Errorf("row %d: %q is not a YYYY-MM-DD date", i, v.ValueStr(i))
			}
		default:
			return nil, fmt.Errorf("%s: %w", a.DataType(), errDateType)
		}
		b.Append(arrow.Date32(d))
	}
	return b.NewArray(), nil
}
