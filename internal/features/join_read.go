package features

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/lake"
)

// JoinStats counts what a join read.
type JoinStats struct {
	Partitions     int   // training partitions read
	StagingReads   int   // staging partition sets read (a divided or hashed side is read once per group)
	Rows           int64 // training rows
	Matched        int64 // training rows that got a value from some staging table
	MaxStagingRows int   // the most staging rows held for one side at once
}

// joinUnit is the training partitions one worker reads in a row: those
// that share staging partitions (one staging bucket when it has fewer
// buckets, the whole date for a hash join), so each is read once.
type joinUnit struct {
	parts []lake.Partition
}

// Read streams the window's training rows, columns cols of the training
// table (its primary key is read as well), each batch with the joined
// columns after them. Up to workers units are read at once; batches come
// in no particular order. Memory is bounded by workers times one unit's
// staging rows plus a training batch. stats is filled in as it goes and
// is complete when the sequence ends.
func (j *Join) Read(ctx context.Context, cols []string, workers int, stats *JoinStats) iter.Seq2[arrow.RecordBatch, error] {
	return j.ReadBuckets(ctx, cols, nil, workers, stats)
}

// ReadBuckets is Read of the training partitions whose bucket is one of
// buckets (every one when nil): a bucket group of a split that fans out,
// each group read by its own activity. The staging partitions each reads
// are those of its training partitions, so groups of whole BucketPeriod
// classes read each staging partition once between them.
func (j *Join) ReadBuckets(ctx context.Context, cols []string, buckets []int, workers int, stats *JoinStats) iter.Seq2[arrow.RecordBatch, error] {
	return func(yield func(arrow.RecordBatch, error) bool) {
		units, scans, err := j.plan(ctx, slices.Concat(cols, j.pk), buckets)
		if err != nil {
			yield(nil, err)
			return
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		type result struct {
			rec arrow.RecordBatch
			err error
		}
		out := make(chan result, workers)
		next := make(chan joinUnit)
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range max(1, workers) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				mem := lake.NewPoolAllocator()
				ctx := compute.WithAllocator(ctx, mem)
				for u := range next {
					var st JoinStats
					err := j.readUnit(ctx, mem, scans, u, &st, func(rec arrow.RecordBatch) bool {
						select {
						case out <- result{rec: rec}:
							return true
						case <-ctx.Done():
							rec.Release()
							return false
						}
					})
					mu.Lock()
					stats.Partitions += st.Partitions
					stats.StagingReads += st.StagingReads
					stats.Rows += st.Rows
					stats.Matched += st.Matched
					stats.MaxStagingRows = max(stats.MaxStagingRows, st.MaxStagingRows)
					mu.Unlock()
					if err != nil {
						select {
						case out <- result{err: err}:
						case <-ctx.Done():
						}
						return
					}
				}
			}()
		}
		go func() {
			defer close(next)
			for _, u := range units {
				select {
				case next <- u:
				case <-ctx.Done():
					return
				}
			}
		}()
		go func() { wg.Wait(); close(out) }()
		defer func() {
			cancel()
			for r := range out { // let the workers finish and free what they hold
				if r.rec != nil {
					r.rec.Release()
				}
			}
		}()
		for r := range out {
			if r.err != nil {
				yield(nil, r.err)
				return
			}
			if !yield(r.rec, nil) {
				return
			}
		}
		if err := ctx.Err(); err != nil {
			yield(nil, err)
		}
	}
}

// joinScans are the scans a join reads tasks through.
type joinScans struct {
	training *table.Scan
	staging  []*table.Scan
}

// plan plans the files of both sides inside the window and groups the
// training partitions into units.
func (j *Join) plan(ctx context.Context, cols []string, buckets []int) ([]joinUnit, *joinScans, error) {
	filter := table.WithRowFilter(lake.DateRange(j.DateColumn, int32(j.Window.Start), int32(j.Window.End)))
	at := table.WithSnapshotID(j.Snapshot)
	parts, err := lake.PlanPartitions(ctx, j.training, lake.Scan(ctx, j.training, filter, at))
	if err != nil {
		return nil, nil, fmt.Errorf("training table %s: %w", j.Training, err)
	}
	if buckets != nil {
		parts = slices.DeleteFunc(parts, func(p lake.Partition) bool {
			return !slices.Contains(buckets, int(p.Values[j.bucketCol]))
		})
	}
	sized := [][]lake.Partition{parts}
	for _, s := range j.Sides {
		s.parts = map[partKey][]lake.Partition{}
		if s.Snapshot == 0 {
			continue
		}
		var date string
		for sc, tc := range s.rename {
			if tc == j.DateColumn {
				date = sc
			}
		}
		sfilter := table.WithRowFilter(lake.DateRange(date, int32(j.Window.Start), int32(j.Window.End)))
		sparts, err := lake.PlanPartitions(ctx, s.table, lake.Scan(ctx, s.table, sfilter, table.WithSnapshotID(s.Snapshot)))
		if err != nil {
			return nil, nil, fmt.Errorf("staging table %s: %w", s.Spec.Table, err)
		}
		for _, p := range sparts {
			k, err := s.key(p, j.DateColumn, j.bucketCol)
			if err != nil {
				return nil, nil, err
			}
			s.parts[k] = append(s.parts[k], p)
		}
		sized = append(sized, sparts)
	}
	size := table.WithArrowBatchSize(batchRows(sized...))
	scans := &joinScans{training: lake.Scan(ctx, j.training, filter, at, size, table.WithSelectedFields(dedupe(cols)...))}
	for _, s := range j.Sides {
		var sc *table.Scan
		if s.Snapshot != 0 {
			sc = lake.Scan(ctx, s.table, table.WithSnapshotID(s.Snapshot), size, table.WithSelectedFields(slices.Concat(s.keys, s.cols)...))
		}
		scans.staging = append(scans.staging, sc)
	}
	// Partitions that share staging partitions go to one unit.
	g := int64(j.BucketPeriod())
	byUnit := map[partKey]*joinUnit{}
	var order []partKey
	for _, p := range parts {
		k := partKey{date: p.Values[j.DateColumn], bucket: p.Values[j.bucketCol] % g}
		u, ok := byUnit[k]
		if !ok {
			u = &joinUnit{}
			byUnit[k] = u
			order = append(order, k)
		}
		u.parts = append(u.parts, p)
	}
	units := make([]joinUnit, 0, len(order))
	for _, k := range order {
		units = append(units, *byUnit[k])
	}
	return units, scans, nil
}

// BucketPeriod is the bucket period the training partitions of one date
// share staging partitions by: training buckets b and b' read the same
// staging partitions when b = b' mod the period. It is the training
// table's bucket count when every side has as many buckets or more, the
// gcd with a side that has fewer (a staging table with m | n buckets is
// read per bucket b mod m), and 1 with a hashed side (read per date).
func (j *Join) BucketPeriod() int {
	g := int64(j.buckets)
	for _, s := range j.Sides {
		switch {
		case s.Mode == JoinHash:
			g = 1
		case s.Mode == JoinDivides && s.Buckets < j.buckets:
			g = gcd(g, int64(s.Buckets))
		}
	}
	return int(g)
}

// BucketColumn is the training table's bucket partition source column.
func (j *Join) BucketColumn() string { return j.bucketCol }

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func dedupe(cols []string) []string {
	var out []string
	for _, c := range cols {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// key is a staging partition's date and bucket.
func (s *JoinSide) key(p lake.Partition, dateCol, bucketCol string) (partKey, error) {
	var k partKey
	var haveDate, haveBucket bool
	for sc, v := range p.Values {
		switch s.rename[sc] {
		case dateCol:
			k.date, haveDate = v, true
		case bucketCol:
			k.bucket, haveBucket = v, true
		}
	}
	if !haveDate || !haveBucket {
		return k, fmt.Errorf("staging table %s: partition %s has no date or bucket value", s.Spec.Table, p.Key)
	}
	return k, nil
}

// stagingFor lists the staging partitions training partition (date,
// bucket b) of n buckets joins with, and a key naming that set.
func (s *JoinSide) stagingFor(date, b int64, n int) ([]lake.Partition, string) {
	m := int64(s.Buckets)
	var buckets []int64
	switch {
	case s.Mode == JoinHash:
		for x := range m {
			buckets = append(buckets, x)
		}
	case m <= int64(n):
		buckets = []int64{b % m}
	default: // more staging buckets: every x = b mod n
		for x := b; x < m; x += int64(n) {
			buckets = append(buckets, x)
		}
	}
	var out []lake.Partition
	names := []string{strconv.FormatInt(date, 10)}
	for _, x := range buckets {
		out = append(out, s.parts[partKey{date, x}]...)
		names = append(names, strconv.FormatInt(x, 10))
	}
	return out, strings.Join(names, "/")
}

// sideRows is one staging side's rows for a unit.
type sideRows struct {
	set   string // the staging partitions read
	keys  []arrow.Array
	cols  []arrow.Array
	all   []arrow.Array
	index *backfill.KeyIndex
	// A staging table written by stage_features holds a bucket's rows in
	// the training table's order, so with the same buckets the join is
	// usually a zip (see stagingSide in promote_groups.go); pos is how far
	// the keys lined up, aligned turns false at the first mismatch.
	pos     int
	aligned bool
}

func (r *sideRows) release() {
	if r != nil {
		release(r.all)
	}
}

// readUnit joins the training partitions of one unit, handing each
// joined batch to emit (which takes ownership).
func (j *Join) readUnit(ctx context.Context, mem memory.Allocator, scans *joinScans, u joinUnit, st *JoinStats, emit func(arrow.RecordBatch) bool) error {
	held := make([]*sideRows, len(j.Sides))
	defer func() {
		for _, h := range held {
			h.release()
		}
	}()
	for _, p := range u.parts {
		date, b := p.Values[j.DateColumn], p.Values[j.bucketCol]
		for i, s := range j.Sides {
			parts, set := s.stagingFor(date, b, j.buckets)
			if held[i] != nil && held[i].set == set {
				held[i].pos, held[i].aligned = 0, false
				continue
			}
			held[i].release()
			held[i] = nil
			var tasks []table.FileScanTask
			for _, sp := range parts {
				tasks = append(tasks, sp.Tasks...)
			}
			if len(tasks) == 0 {
				continue
			}
			arrs, n, err := readTasks(ctx, mem, scans.staging[i], tasks, slices.Concat(s.keys, s.cols))
			if err != nil {
				return fmt.Errorf("read staging table %s, partition %s: %w", s.Spec.Table, set, err)
			}
			st.StagingReads++
			st.MaxStagingRows = max(st.MaxStagingRows, n)
			if n == 0 {
				continue
			}
			held[i] = &sideRows{set: set, keys: arrs[:len(s.keys)], cols: arrs[len(s.keys):], all: arrs, aligned: s.Mode == JoinBucket}
		}
		_, recs, err := scans.training.ReadTasks(ctx, p.Tasks)
		if err != nil {
			return fmt.Errorf("read training table %s, partition %s: %w", j.Training, p.Key, err)
		}
		st.Partitions++
		for rec, err := range recs {
			if err != nil {
				return fmt.Errorf("read training table %s, partition %s: %w", j.Training, p.Key, err)
			}
			joined, err := j.joinBatch(ctx, mem, rec, held, st)
			rec.Release()
			if err != nil {
				return fmt.Errorf("join partition %s: %w", p.Key, err)
			}
			if !emit(joined) {
				return ctx.Err()
			}
		}
	}
	return nil
}

// joinBatch appends the joined columns to one batch of training rows.
func (j *Join) joinBatch(ctx context.Context, mem memory.Allocator, rec arrow.RecordBatch, held []*sideRows, st *JoinStats) (arrow.RecordBatch, error) {
	n := int(rec.NumRows())
	keys, err := columns(rec, j.pk)
	if err != nil {
		return nil, err
	}
	fields := slices.Clone(rec.Schema().Fields())
	cols := slices.Clone(rec.Columns())
	for _, c := range cols {
		c.Retain()
	}
	defer func() { release(cols) }()
	hit := make([]bool, n)
	for i, s := range j.Sides {
		fields = append(fields, s.fields...)
		h := held[i]
		if h == nil {
			for _, f := range s.fields {
				cols = append(cols, array.MakeArrayOfNull(mem, f.Type, n))
			}
			continue
		}
		if h.aligned && h.pos+n <= h.keys[0].Len() && sameKeys(keys, h.keys, h.pos) {
			for _, c := range h.cols {
				cols = append(cols, array.NewSlice(c, int64(h.pos), int64(h.pos+n)))
			}
			h.pos += n
			for r := range hit {
				hit[r] = true
			}
			continue
		}
		h.aligned = false
		if h.index == nil {
			if h.index, err = backfill.NewKeyIndex(s.keys, h.keys); err != nil {
				return nil, badInput("staging table %s: %v", s.Spec.Table, err)
			}
		}
		idx, err := h.index.Lookup(keys)
		if err != nil {
			return nil, fmt.Errorf("staging table %s: %w", s.Spec.Table, err)
		}
		for r, v := range idx {
			if v >= 0 {
				hit[r] = true
			}
		}
		taken, err := backfill.Take(ctx, mem, h.cols, idx)
		if err != nil {
			return nil, fmt.Errorf("staging table %s: %w", s.Spec.Table, err)
		}
		cols = append(cols, taken...)
	}
	for _, h := range hit {
		if h {
			st.Matched++
		}
	}
	st.Rows += int64(n)
	// Field types as the arrays have them: a scan's nested types may
	// carry other element names than the table schema's conversion.
	for i := len(rec.Columns()); i < len(fields); i++ {
		fields[i].Type = cols[i].DataType()
	}
	md := rec.Schema().Metadata()
	return array.NewRecordBatch(arrow.NewSchema(fields, &md), cols, int64(n)), nil
}

// sameKeys reports whether the training keys equal the staging keys from
// row pos on.
func sameKeys(keys, staged []arrow.Array, pos int) bool {
	n := keys[0].Len()
	for k := range keys {
		if !arrow.TypeEqual(keys[k].DataType(), staged[k].DataType()) ||
			!array.SliceEqual(keys[k], 0, int64(n), staged[k], int64(pos), int64(pos+n)) {
			return false
		}
	}
	return true
}
