package split

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/features"
)

// filesJoin joins feature files onto a split of files' rows as they are
// read, under the alignments of stage_features (package backfill's index
// and match), so a row never sees a feature published after its event.
// It holds the feature rows of at most two training days at once: the
// training files are read in path order, which is day order for date
// folders.
type filesJoin struct {
	sides []*joinSide
	// window is the split's: rows outside it (which pruning with a
	// margin lets through) are dropped by the split, so they are not
	// joined or counted.
	window backfill.DateRange
}

// joinSide is one checked `join:` entry of files.
type joinSide struct {
	i        int
	name     string // the entry's files, for messages
	src      *filesSource
	align    backfill.Alignment
	trainKey []string // training key columns, sorted
	featKey  []string // the feature columns they match, in the same order
	timeCol  string   // feature side: its date column, or its publication time for as_of
	eventCol string   // training side's event time (as_of)
	lookback int
	loc      *time.Location // zone of the feature side's days and as_of window
	sources  []string       // feature columns joined
	fields   []arrow.Field  // as the split sees them (prefixed)
	cache    map[backfill.Day]*dayFeatures
	rows     int64 // training rows joined
	matched  int64 // of them, rows that got a feature row
	maxHeld  int   // the most feature rows held for one day
}

// dayFeatures are the feature rows training rows of one day may join.
type dayFeatures struct {
	ix   *backfill.FeatureIndex // nil: none
	cols []arrow.Array          // the joined columns, one array each
}

func (d *dayFeatures) release() {
	for _, c := range d.cols {
		c.Release()
	}
}

// trainColumns are the training columns the join reads besides those the
// split keeps.
func (j *filesJoin) trainColumns() []string {
	var out []string
	for _, s := range j.sides {
		out = append(out, s.trainKey...)
		if s.eventCol != "" {
			out = append(out, s.eventCol)
		}
	}
	return out
}

// fields are the joined columns, as the split's schema sees them.
func (j *filesJoin) fields() []arrow.Field {
	var out []arrow.Field
	for _, s := range j.sides {
		out = append(out, s.fields...)
	}
	return out
}

// apply appends the joined columns to a training batch whose rows'
// days are days.
func (j *filesJoin) apply(ctx context.Context, rec arrow.RecordBatch, days *array.Date32) (arrow.RecordBatch, error) {
	fields := slices.Clone(rec.Schema().Fields())
	cols := slices.Clone(rec.Columns())
	var made []arrow.Array
	defer func() {
		for _, a := range made {
			a.Release()
		}
	}()
	for _, s := range j.sides {
		taken, err := s.join(ctx, rec, days, j.window)
		if err != nil {
			return nil, err
		}
		made = append(made, taken...)
		fields = append(fields, s.fields...)
		cols = append(cols, taken...)
	}
	return array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, rec.NumRows()), nil
}

// join is the side's columns for the rows of rec.
func (s *joinSide) join(ctx context.Context, rec arrow.RecordBatch, days *array.Date32, window backfill.DateRange) ([]arrow.Array, error) {
	n := int(rec.NumRows())
	keys := make([]arrow.Array, len(s.trainKey))
	for i, k := range s.trainKey {
		keys[i] = rec.Column(rec.Schema().FieldIndices(k)[0])
	}
	var times arrow.Array = days
	if s.eventCol != "" {
		times = rec.Column(rec.Schema().FieldIndices(s.eventCol)[0])
	}
	want := map[backfill.Day]bool{}
	inWindow := 0
	for i := range n {
		if days.IsValid(i) && window.Contains(backfill.Day(days.Value(i))) {
			want[backfill.Day(days.Value(i))] = true
			inWindow++
		}
	}
	s.evict(want)
	idx := make([]int32, n)
	for i := range idx {
		idx[i] = -1
	}
	var parts [][]arrow.Array
	offset := int32(0)
	for _, d := range slices.Sorted(maps.Keys(want)) {
		df, err := s.day(ctx, d)
		if err != nil {
			return nil, err
		}
		if df.ix == nil {
			continue
		}
		got, err := df.ix.Match(keys, times)
		if err != nil {
			return nil, fmt.Errorf("%w: join[%d] %s: %v", errSplitInput, s.i, s.name, err)
		}
		for i, r := range got {
			if r >= 0 && days.IsValid(i) && backfill.Day(days.Value(i)) == d {
				idx[i] = offset + r
			}
		}
		offset += int32(df.cols[0].Len())
		parts = append(parts, df.cols)
	}
	s.rows += int64(inWindow)
	s.matched += int64(backfill.Matched(idx))
	src := make([]arrow.Array, len(s.fields))
	for c, f := range s.fields {
		var err error
		switch len(parts) {
		case 0:
			src[c] = array.MakeArrayOfNull(memory.DefaultAllocator, f.Type, 0)
		case 1:
			src[c] = parts[0][c]
			src[c].Retain()
		default:
			cs := make([]arrow.Array, len(parts))
			for p := range parts {
				cs[p] = parts[p][c]
			}
			src[c], err = array.Concatenate(cs, memory.DefaultAllocator)
		}
		if err != nil {
			return nil, err
		}
	}
	defer func() {
		for _, a := range src {
			a.Release()
		}
	}()
	if len(parts) == 0 {
		out := make([]arrow.Array, len(s.fields))
		for c, f := range s.fields {
			out[c] = array.MakeArrayOfNull(memory.DefaultAllocator, f.Type, n)
		}
		return out, nil
	}
	return backfill.Take(ctx, memory.DefaultAllocator, src, idx)
}

// evict drops the cached days the batch does not need once two are held.
func (s *joinSide) evict(want map[backfill.Day]bool) {
	if len(s.cache) < 2 {
		return
	}
	for d, df := range s.cache {
		if !want[d] {
			df.release()
			delete(s.cache, d)
		}
	}
}

// day reads and indexes the feature rows training rows of day d may
// join: those of the alignment's window (stage_features' Window, its
// bounds taken in the side's zone), from the files whose folders and row
// groups may hold them.
func (s *joinSide) day(ctx context.Context, d backfill.Day) (*dayFeatures, error) {
	if df, ok := s.cache[d]; ok {
		return df, nil
	}
	w := s.align.WindowIn(d, s.lookback, s.loc)
	if s.align.UsesDate() {
		s.src.window = backfill.DateRange{Start: w.FromDay, End: w.ToDay}
	} else {
		// Days with a margin: the files' days may be in another zone.
		s.src.window = backfill.DateRange{Start: d - backfill.Day(s.lookback) - 1, End: d + 1}
	}
	cols := append(slices.Clone(s.featKey), s.sources...)
	cols = append(cols, s.timeCol)
	var batches []arrow.RecordBatch
	defer func() {
		for _, b := range batches {
			b.Release()
		}
	}()
	for raw, err := range s.src.rawRecords(ctx, cols) {
		if err != nil {
			return nil, fmt.Errorf("join[%d] %s: %w", s.i, s.name, err)
		}
		rec, err := s.filter(ctx, raw, w)
		raw.Release()
		if err != nil {
			return nil, fmt.Errorf("%w: join[%d] %s: %v", errSplitInput, s.i, s.src.current, err)
		}
		if rec.NumRows() > 0 {
			batches = append(batches, rec)
		} else {
			rec.Release()
		}
	}
	df := &dayFeatures{}
	if s.cache == nil {
		s.cache = map[backfill.Day]*dayFeatures{}
	}
	if len(batches) == 0 {
		s.cache[d] = df
		return df, nil
	}
	all := make([]arrow.Array, len(cols))
	for c := range cols {
		cs := make([]arrow.Array, len(batches))
		for b := range batches {
			cs[b] = batches[b].Column(c)
		}
		a, err := array.Concatenate(cs, memory.DefaultAllocator)
		if err != nil {
			return nil, err
		}
		all[c] = a
	}
	nk := len(s.featKey)
	ix, err := backfill.NewFeatureIndex(s.align, s.featKey, all[:nk], all[len(all)-1])
	for i, a := range all {
		if i < nk || i == len(all)-1 || err != nil {
			a.Release()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: join[%d] %s: %v", errSplitInput, s.i, s.name, err)
	}
	df.ix, df.cols = ix, all[nk:len(all)-1]
	s.maxHeld = max(s.maxHeld, ix.Rows())
	s.cache[d] = df
	return df, nil
}

// filter keeps the rows of a feature batch inside the window: for the
// date alignments, its day (in the side's zone) is the window's day, and
// the time column becomes that day; for as_of, its publication time is
// inside the window's span.
func (s *joinSide) filter(ctx context.Context, raw arrow.RecordBatch, w backfill.FeatureWindow) (arrow.RecordBatch, error) {
	last := int(raw.NumCols()) - 1
	var mask arrow.Array
	rec := raw
	if s.align.UsesDate() {
		days, err := s.src.days(raw)
		if err != nil {
			return nil, err
		}
		defer days.Release()
		b := array.NewBooleanBuilder(memory.DefaultAllocator)
		defer b.Release()
		dd := days.(*array.Date32)
		for i := range dd.Len() {
			v := backfill.Day(dd.Value(i))
			b.Append(dd.IsValid(i) && v >= w.FromDay && v <= w.ToDay)
		}
		mask = b.NewArray()
		cols := slices.Clone(raw.Columns())
		fields := slices.Clone(raw.Schema().Fields())
		cols[last], fields[last].Type = days, arrow.FixedWidthTypes.Date32
		rec = array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, raw.NumRows())
		defer rec.Release()
	} else {
		var err error
		if mask, err = inMicros(raw.Column(last), w.FromMicros, w.ToMicros); err != nil {
			return nil, err
		}
	}
	defer mask.Release()
	return compute.FilterRecordBatch(ctx, rec, mask, compute.DefaultFilterOptions())
}

// inMicros is the mask of a timestamp column's values in [from, to]
// microseconds.
func inMicros(col arrow.Array, from, to int64) (arrow.Array, error) {
	ts, ok := col.(*array.Timestamp)
	if !ok {
		return nil, fmt.Errorf("publication time column is %s, want a timestamp", col.DataType())
	}
	unit := ts.DataType().(*arrow.TimestampType).Unit
	b := array.NewBooleanBuilder(memory.DefaultAllocator)
	defer b.Release()
	for i := range ts.Len() {
		if ts.IsNull(i) {
			b.Append(false)
			continue
		}
		v := arrow.Timestamp(ts.Value(i)).ToTime(unit)
		us := v.UnixMicro()
		if unit == arrow.Nanosecond && v.Nanosecond()%1000 != 0 && us < 0 {
			us-- // floor, as backfill's time reader does
		}
		b.Append(us >= from && us <= to)
	}
	return b.NewArray(), nil
}

// summary says how the join went, for the split's record.
func (j *filesJoin) summary() string {
	var parts []string
	for _, s := range j.sides {
		parts = append(parts, fmt.Sprintf("joined %s (%s, %d columns): %d of %d rows matched, at most %d feature rows held",
			s.name, s.align, len(s.fields), s.matched, s.rows, s.maxHeld))
	}
	return strings.Join(parts, "; ")
}

// columns are the joined columns, for the split's record.
func (j *filesJoin) columns() []features.JoinedColumn {
	var out []features.JoinedColumn
	for _, s := range j.sides {
		for i, f := range s.fields {
			out = append(out, features.JoinedColumn{Name: f.Name, Source: s.sources[i], Table: s.name})
		}
	}
	return out
}

// close releases the cached feature rows.
func (j *filesJoin) close() {
	for _, s := range j.sides {
		for d, df := range s.cache {
			df.release()
			delete(s.cache, d)
		}
	}
}
