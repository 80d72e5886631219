package backfill

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// point is one feature row of an entity: its time (a day for the date
// alignments, microseconds for AsOf) and its row number.
type point struct {
	t   int64
	row int32
}

// FeatureIndex holds the feature rows of a window by entity key, sorted by
// time, ready to be matched to training rows under one alignment.
type FeatureIndex struct {
	align Alignment
	int   bool
	ints  map[int64][]point
	strs  map[string][]point
	rows  int
}

// NewFeatureIndex indexes feature rows: their entity key columns (named
// names, for messages) and their time column, a date32 column for SameDay
// and PreviousDay or a timestamp column for AsOf. Rows with a null key or
// time can never be matched and are left out. Two rows of one entity with
// the same time are an error: which of them a training row should get is
// undefined, and picking one silently would make the join depend on file
// order.
func NewFeatureIndex(align Alignment, names []string, keyCols []arrow.Array, times arrow.Array) (*FeatureIndex, error) {
	k, err := newKeyReader(keyCols)
	if err != nil {
		return nil, err
	}
	timeOf, err := timeReader(align, times, "feature")
	if err != nil {
		return nil, err
	}
	ix := &FeatureIndex{align: align, int: k.intMode()}
	n := times.Len()
	if ix.int {
		ix.ints = make(map[int64][]point, n/4+1)
	} else {
		ix.strs = make(map[string][]point, n/4+1)
	}
	for i := range n {
		if k.null(i) || times.IsNull(i) {
			continue
		}
		p := point{t: timeOf(i), row: int32(i)}
		if ix.int {
			key := k.int(i)
			ix.ints[key] = append(ix.ints[key], p)
		} else {
			key := k.str(i)
			ix.strs[key] = append(ix.strs[key], p)
		}
		ix.rows++
	}
	check := func(ps []point) error {
		if len(ps) > 1 {
			sort.Slice(ps, func(a, b int) bool { return ps[a].t < ps[b].t || (ps[a].t == ps[b].t && ps[a].row < ps[b].row) })
			for j := 1; j < len(ps); j++ {
				if ps[j].t == ps[j-1].t {
					return fmt.Errorf("two feature rows for %s at %s %s (rows %d and %d): feature rows must be unique per entity and %s",
						k.describe(names, int(ps[j].row)), ix.timeName(), describeTime(align, ps[j].t), ps[j-1].row, ps[j].row, ix.timeName())
				}
			}
		}
		return nil
	}
	for _, ps := range ix.ints {
		if err := check(ps); err != nil {
			return nil, err
		}
	}
	for _, ps := range ix.strs {
		if err := check(ps); err != nil {
			return nil, err
		}
	}
	return ix, nil
}

func (ix *FeatureIndex) timeName() string {
	if ix.align.UsesDate() {
		return "date"
	}
	return "timestamp"
}

func describeTime(align Alignment, t int64) string {
	if align.UsesDate() {
		return Day(t).String()
	}
	return fmt.Sprintf("%dus", t)
}

// Rows is the number of feature rows indexed.
func (ix *FeatureIndex) Rows() int { return ix.rows }

// timeReader reads a row's time as the alignment compares it: days for
// the date alignments, microseconds for AsOf.
func timeReader(align Alignment, col arrow.Array, side string) (func(int) int64, error) {
	if align.UsesDate() {
		d, ok := col.(*array.Date32)
		if !ok {
			return nil, fmt.Errorf("%s date column is %s, want date", side, col.DataType())
		}
		return func(i int) int64 { return int64(d.Value(i)) }, nil
	}
	ts, ok := col.(*array.Timestamp)
	if !ok {
		return nil, fmt.Errorf("%s time column is %s, want a timestamp", side, col.DataType())
	}
	unit := ts.DataType().(*arrow.TimestampType).Unit
	var scale func(int64) int64
	switch unit {
	case arrow.Microsecond:
		scale = func(v int64) int64 { return v }
	case arrow.Millisecond:
		scale = func(v int64) int64 { return v * 1000 }
	case arrow.Second:
		scale = func(v int64) int64 { return v * 1_000_000 }
	case arrow.Nanosecond:
		// Floor, so a nanosecond after a feature's microsecond still sees it
		// and one before never does.
		scale = func(v int64) int64 {
			q := v / 1000
			if v%1000 < 0 {
				q--
			}
			return q
		}
	}
	return func(i int) int64 { return scale(int64(ts.Value(i))) }, nil
}

// Match returns, for each training row (its entity key columns, in the
// index's key order, and its time: the date for SameDay and PreviousDay,
// the event timestamp for AsOf), the feature row it joins, or -1 when it
// joins none. AsOf never returns a row stamped after the event time.
func (ix *FeatureIndex) Match(keyCols []arrow.Array, times arrow.Array) ([]int32, error) {
	k, err := newKeyReader(keyCols)
	if err != nil {
		return nil, err
	}
	if k.intMode() != ix.int {
		return nil, fmt.Errorf("training key columns do not match the feature key types")
	}
	timeOf, err := timeReader(ix.align, times, "training")
	if err != nil {
		return nil, err
	}
	n := times.Len()
	out := make([]int32, n)
	for i := range n {
		out[i] = -1
		if k.null(i) || times.IsNull(i) {
			continue
		}
		var ps []point
		if ix.int {
			ps = ix.ints[k.int(i)]
		} else {
			ps = ix.strs[k.str(i)]
		}
		if len(ps) == 0 {
			continue
		}
		out[i] = pick(ix.align, ps, timeOf(i))
	}
	return out, nil
}

// pick chooses among an entity's points (sorted by time) the one the
// alignment joins to a training row at time t, or -1.
func pick(align Alignment, ps []point, t int64) int32 {
	switch align {
	case SameDay, PreviousDay:
		want := t
		if align == PreviousDay {
			want = t - 1
		}
		j, found := slices.BinarySearchFunc(ps, want, func(p point, w int64) int {
			switch {
			case p.t < w:
				return -1
			case p.t > w:
				return 1
			}
			return 0
		})
		if found {
			return ps[j].row
		}
		return -1
	default:
		// The first point after t; the one before it is the latest <= t.
		j := sort.Search(len(ps), func(j int) bool { return ps[j].t > t })
		if j == 0 {
			return -1
		}
		return ps[j-1].row
	}
}

// Matched counts the rows of a match result that joined something.
func Matched(idx []int32) int {
	n := 0
	for _, r := range idx {
		if r >= 0 {
			n++
		}
	}
	return n
}

// Take gathers rows idx of every column, a null where idx is -1. The
// columns must be single arrays (concatenate chunks first).
func Take(ctx context.Context, mem memory.Allocator, cols []arrow.Array, idx []int32) ([]arrow.Array, error) {
	b := array.NewInt32Builder(mem)
	defer b.Release()
	b.Reserve(len(idx))
	for _, r := range idx {
		if r < 0 {
			b.AppendNull()
		} else {
			b.UnsafeAppend(r)
		}
	}
	indices := b.NewInt32Array()
	defer indices.Release()
	ctx = compute.WithAllocator(ctx, mem)
	out := make([]arrow.Array, len(cols))
	for c, col := range cols {
		taken, err := compute.TakeArray(ctx, col, indices)
		if err != nil {
			for _, o := range out[:c] {
				o.Release()
			}
			return nil, fmt.Errorf("take column %d (%s): %w", c, col.DataType(), err)
		}
		out[c] = taken
	}
	return out, nil
}
