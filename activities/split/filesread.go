package split

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/s3store"
)

// filesSource reads the window's rows of plain Parquet files: files whose
// date folder is outside the window are never opened, and row groups
// whose date statistics are outside it are never read.
type filesSource struct {
	store   *s3store.Store
	files   []sourceFile // after pruning by folder
	dateCol string
	window  backfill.DateRange
	read    *FilesRead
	want    *arrow.Schema // the first file's schema, date column as date32
}

// errDateType says a date column's type is not one a split reads.
var errDateType = errors.New("want a DATE, a TIMESTAMP (its UTC day) or a YYYY-MM-DD string")

// dateType checks that t is a date column type the split converts.
func dateType(t arrow.DataType) error {
	switch t.ID() {
	case arrow.DATE32, arrow.DATE64, arrow.TIMESTAMP, arrow.STRING, arrow.LARGE_STRING:
		return nil
	}
	return errDateType
}

// newFilesSource prunes files by folder date and opens the first kept
// file for the schema the split infers its columns from.
func newFilesSource(ctx context.Context, store *s3store.Store, files []sourceFile, patterns []string, dateCol string, window backfill.DateRange) (*filesSource, error) {
	src := &filesSource{store: store, dateCol: dateCol, window: window, read: &FilesRead{Patterns: patterns, Matched: len(files)}}
	for _, f := range files {
		if d, ok := folderDay(f.Name, dateCol); ok && !window.Contains(d) {
			src.read.Pruned++
			continue
		}
		src.files = append(src.files, f)
	}
	if len(src.files) == 0 {
		return nil, fmt.Errorf("%w: none of the %d files matched is in the window %s (by their %s= folders)", errSplitInput, len(files), window, dateCol)
	}
	pf, closer, err := src.open(ctx, src.files[0])
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	sch, err := fileSchema(pf)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errSplitInput, src.files[0].Name, err)
	}
	if src.want, err = src.normalSchema(sch, src.files[0].Name); err != nil {
		return nil, err
	}
	return src, nil
}

// normalSchema is sch with its date column as date32, the type the
// split's converter reads.
func (s *filesSource) normalSchema(sch *arrow.Schema, name string) (*arrow.Schema, error) {
	idx := sch.FieldIndices(s.dateCol)
	if len(idx) == 0 {
		return nil, fmt.Errorf("%w: %s has no date column %q (date_column)", errSplitInput, name, s.dateCol)
	}
	f := sch.Field(idx[0])
	if err := dateType(f.Type); err != nil {
		return nil, fmt.Errorf("%w: %s: date column %q is %s: %v", errSplitInput, name, s.dateCol, f.Type, err)
	}
	fields := slices.Clone(sch.Fields())
	fields[idx[0]].Type = arrow.FixedWidthTypes.Date32
	return arrow.NewSchema(fields, nil), nil
}

func fileSchema(pf *file.Reader) (*arrow.Schema, error) {
	return pqarrow.FromParquet(pf.MetaData().Schema, &pqarrow.ArrowReadProperties{}, pf.MetaData().KeyValueMetadata())
}

// open opens one file's footer: a local file, or an object read by
// ranges so that only the footer and the row groups kept are fetched.
func (s *filesSource) open(ctx context.Context, f sourceFile) (*file.Reader, io.Closer, error) {
	var r interface {
		io.ReaderAt
		io.Seeker
		io.Closer
	}
	if f.Key != "" {
		r = &objectReader{ctx: ctx, store: s.store, key: f.Key, size: f.Size}
	} else {
		lf, err := os.Open(f.Path)
		if err != nil {
			return nil, nil, fmt.Errorf("files: open %s: %w", f.Path, err)
		}
		r = lf
	}
	pf, err := file.NewParquetReader(r)
	if err != nil {
		r.Close()
		return nil, nil, fmt.Errorf("%w: %s is not a Parquet file: %v", errSplitInput, f.Name, err)
	}
	s.read.Read++
	s.read.Bytes += f.Size
	s.read.Files = append(s.read.Files, f.Name)
	return pf, r, nil
}

// records yields the kept row groups of every kept file as record
// batches of cols (the date column as date32). Each file is checked
// against the first one's schema for these columns before it is read.
func (s *filesSource) records(ctx context.Context, cols []string) iter.Seq2[arrow.RecordBatch, error] {
	return func(yield func(arrow.RecordBatch, error) bool) {
		*s.read = FilesRead{Patterns: s.read.Patterns, Matched: s.read.Matched, Pruned: s.read.Pruned}
		for _, f := range s.files {
			if !s.readFile(ctx, f, cols, yield) {
				return
			}
		}
	}
}

// readFile yields f's rows; false when the iteration is over.
func (s *filesSource) readFile(ctx context.Context, f sourceFile, cols []string, yield func(arrow.RecordBatch, error) bool) bool {
	fail := func(err error) bool {
		yield(nil, err)
		return false
	}
	pf, closer, err := s.open(ctx, f)
	if err != nil {
		return fail(err)
	}
	defer closer.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 8192}, memory.DefaultAllocator)
	if err != nil {
		return fail(fmt.Errorf("%w: %s: %v", errSplitInput, f.Name, err))
	}
	sch, err := fr.Schema()
	if err == nil {
		sch, err = s.normalSchema(sch, f.Name)
	}
	if err != nil {
		return fail(err)
	}
	leaves, dateIdx, err := s.columns(fr, sch, cols, f.Name)
	if err != nil {
		return fail(err)
	}
	groups := s.keptGroups(pf, dateIdx, fr.Manifest.Fields)
	if len(groups) == 0 {
		return true
	}
	rr, err := fr.GetRecordReader(ctx, leaves, groups)
	if err != nil {
		return fail(fmt.Errorf("read %s: %w", f.Name, err))
	}
	defer rr.Release()
	for rr.Next() {
		rec, err := s.normalize(rr.RecordBatch())
		if err != nil {
			return fail(fmt.Errorf("%w: %s: %v", errSplitInput, f.Name, err))
		}
		if !yield(rec, nil) {
			return false
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return fail(fmt.Errorf("read %s: %w", f.Name, err))
	}
	return true
}

// columns checks that the file has cols with the first file's types and
// returns their Parquet leaf columns and the date column's field index.
func (s *filesSource) columns(fr *pqarrow.FileReader, sch *arrow.Schema, cols []string, name string) ([]int, int, error) {
	var leaves []int
	dateIdx := -1
	for _, c := range cols {
		idx := sch.FieldIndices(c)
		want, _ := s.want.FieldsByName(c)
		if len(idx) == 0 {
			return nil, 0, fmt.Errorf("%w: %s has no column %q", errSplitInput, name, c)
		}
		if got := sch.Field(idx[0]).Type; len(want) > 0 && !arrow.TypeEqual(got, want[0].Type) {
			return nil, 0, fmt.Errorf("%w: %s: column %q is %s, but %s in %s", errSplitInput, name, c, got, want[0].Type, s.files[0].Name)
		}
		if c == s.dateCol {
			dateIdx = idx[0]
		}
		leaves = appendLeaves(leaves, fr.Manifest.Fields[idx[0]])
	}
	return leaves, dateIdx, nil
}

func appendLeaves(out []int, f pqarrow.SchemaField) []int {
	if f.IsLeaf() {
		return append(out, f.ColIndex)
	}
	for _, c := range f.Children {
		out = appendLeaves(out, c)
	}
	return out
}

// keptGroups are the row groups whose date statistics overlap the window
// (all of them where the file has no statistics for the column).
func (s *filesSource) keptGroups(pf *file.Reader, dateIdx int, fields []pqarrow.SchemaField) []int {
	var kept []int
	leaf := -1
	if dateIdx >= 0 && fields[dateIdx].IsLeaf() {
		leaf = fields[dateIdx].ColIndex
	}
	for g := range pf.NumRowGroups() {
		if leaf >= 0 {
			if lo, hi, ok := groupDays(pf.MetaData().RowGroup(g), leaf, fields[dateIdx].Field.Type); ok &&
				(hi < s.window.Start || lo > s.window.End) {
				s.read.RowGroupsPruned++
				continue
			}
		}
		kept = append(kept, g)
	}
	s.read.RowGroups += len(kept)
	return kept
}

// groupDays is the range of days a row group's date column statistics
// say it holds.
func groupDays(rg *metadata.RowGroupMetaData, leaf int, t arrow.DataType) (lo, hi backfill.Day, ok bool) {
	cc, err := rg.ColumnChunk(leaf)
	if err != nil {
		return 0, 0, false
	}
	if set, err := cc.StatsSet(); err != nil || !set {
		return 0, 0, false
	}
	st, err := cc.Statistics()
	if err != nil || st == nil || !st.HasMinMax() {
		return 0, 0, false
	}
	switch v := st.(type) {
	case *metadata.Int32Statistics:
		if t.ID() == arrow.DATE32 {
			return backfill.Day(v.Min()), backfill.Day(v.Max()), true
		}
	case *metadata.Int64Statistics:
		switch tt := t.(type) {
		case *arrow.TimestampType:
			return tsDay(v.Min(), tt.Unit), tsDay(v.Max(), tt.Unit), true
		case *arrow.Date64Type:
			return tsDay(v.Min(), arrow.Millisecond), tsDay(v.Max(), arrow.Millisecond), true
		}
	case *metadata.ByteArrayStatistics:
		a, err1 := backfill.ParseDay(string(v.Min()))
		b, err2 := backfill.ParseDay(string(v.Max()))
		return a, b, err1 == nil && err2 == nil
	}
	return 0, 0, false
}

// tsDay is the UTC day of a timestamp in unit.
func tsDay(v int64, unit arrow.TimeUnit) backfill.Day {
	t := arrow.Timestamp(v).ToTime(unit)
	return backfill.Day(t.Unix()/86400) - boolDay(t.Unix()%86400 < 0)
}

func boolDay(b bool) backfill.Day {
	if b {
		return 1
	}
	return 0
}

// normalize returns rec with its date column as date32: the record the
// split's converter reads whatever the file's date type.
func (s *filesSource) normalize(rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	idx := rec.Schema().FieldIndices(s.dateCol)
	cols := slices.Clone(rec.Columns())
	fields := slices.Clone(rec.Schema().Fields())
	if len(idx) > 0 && cols[idx[0]].DataType().ID() != arrow.DATE32 {
		d, err := toDate32(cols[idx[0]])
		if err != nil {
			return nil, fmt.Errorf("date column %q: %w", s.dateCol, err)
		}
		defer d.Release()
		cols[idx[0]] = d
		fields[idx[0]].Type = arrow.FixedWidthTypes.Date32
	}
	return array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, rec.NumRows()), nil
}

// toDate32 converts a date64, timestamp or YYYY-MM-DD string column.
func toDate32(a arrow.Array) (arrow.Array, error) {
	b := array.NewDate32Builder(memory.DefaultAllocator)
	defer b.Release()
	b.Reserve(a.Len())
	for i := range a.Len() {
		if a.IsNull(i) {
			b.AppendNull()
			continue
		}
		var d backfill.Day
		switch v := a.(type) {
		case *array.Date64:
			d = tsDay(int64(v.Value(i)), arrow.Millisecond)
		case *array.Timestamp:
			d = tsDay(int64(v.Value(i)), v.DataType().(*arrow.TimestampType).Unit)
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

// objectReader reads an object of the store by ranges, as Parquet's
// reader asks for them (the footer, then each column chunk kept).
type objectReader struct {
	ctx   context.Context
	store *s3store.Store
	key   string
	size  int64
	off   int64
}

func (r *objectReader) ReadAt(p []byte, off int64) (int, error) {
	if off >= r.size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), r.size-off)
	b, err := r.store.GetRange(r.ctx, r.key, off, n)
	if err != nil {
		return 0, err
	}
	copy(p, b)
	if n < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

func (r *objectReader) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
		r.off = off
	case io.SeekCurrent:
		r.off += off
	case io.SeekEnd:
		r.off = r.size + off
	}
	return r.off, nil
}

func (r *objectReader) Close() error { return nil }
