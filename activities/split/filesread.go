package split

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"slices"
	"time"

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
// whose date statistics are outside it are never read. Hive-style
// key=value folders read as columns of their files' rows.
type filesSource struct {
	store   *s3store.Store
	files   []sourceFile // after pruning by folder
	dateCol string
	loc     *time.Location // the zone a timestamp's day is taken in
	window  backfill.DateRange
	read    *FilesRead
	want    *arrow.Schema // the first file's schema and folders, date column as date32
	raw     *arrow.Schema // want with the date column's type in the files
	join    *filesJoin    // files joined as the rows are read; nil: none
	current string        // the file being read, for messages
	// side: a joined feature side, read day by day: its files are pruned
	// by folder at each read, and its counts add up over the reads.
	side bool
}

// errDateType says a date column's type is not one a split reads.
var errDateType = errors.New("want a DATE, a TIMESTAMP (its day in the split's timezone) or a YYYY-MM-DD string")

// dateType checks that t is a date column type the split converts.
func dateType(t arrow.DataType) error {
	switch t.ID() {
	case arrow.DATE32, arrow.DATE64, arrow.TIMESTAMP, arrow.STRING, arrow.LARGE_STRING:
		return nil
	}
	return errDateType
}

// newFilesSource prunes files by folder date and opens the first kept
// file for the schema the split infers its columns from. A date folder
// whose value is not a date fails, naming it. Where the date column is
// not the folders' key (date_column: ts under date=YYYY-MM-DD folders), a
// date= folder prunes with a day's margin either side: the folder's day
// and the timestamp's day in the split's zone differ by at most one.
func newFilesSource(ctx context.Context, store *s3store.Store, files []sourceFile, patterns []string, dateCol string, loc *time.Location, window backfill.DateRange) (*filesSource, error) {
	src := &filesSource{store: store, dateCol: dateCol, loc: loc, window: window, read: &FilesRead{Patterns: patterns, Matched: len(files)}}
	for _, f := range files {
		in, err := src.folderInWindow(f.Name)
		if err != nil {
			return nil, err
		}
		if !in {
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
	src.raw = src.withFolders(sch, src.files[0].Name)
	if src.want, err = src.normalSchema(src.raw, src.files[0].Name); err != nil {
		return nil, err
	}
	return src, nil
}

// folderInWindow reports whether a file's date folder (if it has one)
// may hold rows of the window.
func (s *filesSource) folderInWindow(name string) (bool, error) {
	d, ok, err := folderDay(name, s.dateCol)
	if err != nil {
		return false, err
	}
	if ok {
		return s.window.Contains(d), nil
	}
	if s.dateCol != "date" {
		if d, ok, _ := folderDay(name, "date"); ok {
			return d >= s.window.Start-1 && d <= s.window.End+1, nil
		}
	}
	return true, nil
}

// withFolders is a file's schema with its key=value folders that the
// file has no column for appended as columns.
func (s *filesSource) withFolders(sch *arrow.Schema, name string) *arrow.Schema {
	fields := slices.Clone(sch.Fields())
	for _, p := range hiveParts(name) {
		if len(sch.FieldIndices(p.Key)) == 0 && !slices.ContainsFunc(fields, func(f arrow.Field) bool { return f.Name == p.Key }) {
			fields = append(fields, partitionField(p.Key, s.dateCol))
		}
	}
	return arrow.NewSchema(fields, nil)
}

// normalSchema is sch with its date column as date32, the type the
// split's converter reads.
func (s *filesSource) normalSchema(sch *arrow.Schema, name string) (*arrow.Schema, error) {
	idx := sch.FieldIndices(s.dateCol)
	if len(idx) == 0 {
		return nil, fmt.Errorf("%w: %s has no date column %q (date_column), and no %s=YYYY-MM-DD folder", errSplitInput, name, s.dateCol, s.dateCol)
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
	// A joined side opens a file once for each day that needs it: its
	// record names it once (the record goes into the run's history).
	if !s.side || !slices.Contains(s.read.Files, f.Name) {
		s.read.Files = append(s.read.Files, f.Name)
	}
	return pf, r, nil
}

// records yields the kept row groups of every kept file as record
// batches of cols (the date column as date32). Each file is checked
// against the first one's schema for these columns before it is read.
func (s *filesSource) records(ctx context.Context, cols []string) iter.Seq2[arrow.RecordBatch, error] {
	return func(yield func(arrow.RecordBatch, error) bool) {
		for raw, err := range s.rawRecords(ctx, cols) {
			if err != nil {
				yield(nil, err)
				return
			}
			rec, err := s.normalize(raw, nil)
			raw.Release()
			if err != nil {
				err = fmt.Errorf("%w: %s: %v", errSplitInput, s.current, err)
			}
			if !yield(rec, err) || err != nil {
				return
			}
		}
	}
}

// rawRecords is records with the date column as the files hold it (a
// folder's date as date32).
func (s *filesSource) rawRecords(ctx context.Context, cols []string) iter.Seq2[arrow.RecordBatch, error] {
	return func(yield func(arrow.RecordBatch, error) bool) {
		if !s.side {
			*s.read = FilesRead{Patterns: s.read.Patterns, Matched: s.read.Matched, Pruned: s.read.Pruned}
		}
		for _, f := range s.files {
			if s.side {
				if in, err := s.folderInWindow(f.Name); err != nil || !in {
					continue // a bad folder failed when the side was opened
				}
			}
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
	s.current = f.Name
	pf, closer, err := s.open(ctx, f)
	if err != nil {
		return fail(err)
	}
	defer closer.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 8192}, memory.DefaultAllocator)
	if err != nil {
		return fail(fmt.Errorf("%w: %s: %v", errSplitInput, f.Name, err))
	}
	fsch, err := fr.Schema()
	if err != nil {
		return fail(fmt.Errorf("%w: %s: %v", errSplitInput, f.Name, err))
	}
	sch, err := s.normalSchema(s.withFolders(fsch, f.Name), f.Name)
	if err != nil {
		return fail(err)
	}
	leaves, fileCols, dateIdx, err := s.columns(fr, fsch, sch, cols, f.Name)
	if err != nil {
		return fail(err)
	}
	groups := s.keptGroups(pf, dateIdx, fr.Manifest.Fields)
	if len(groups) == 0 {
		return true
	}
	if len(leaves) == 0 {
		// Only folder columns: the rows are counted, not read.
		return s.folderOnly(pf, groups, cols, f.Name, yield)
	}
	rr, err := fr.GetRecordReader(ctx, leaves, groups)
	if err != nil {
		return fail(fmt.Errorf("read %s: %w", f.Name, err))
	}
	defer rr.Release()
	for rr.Next() {
		rec, err := s.assemble(rr.RecordBatch(), cols, fileCols, f.Name)
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

// folderOnly yields the rows of a file's kept row groups when every
// column asked for comes from its folders.
func (s *filesSource) folderOnly(pf *file.Reader, groups []int, cols []string, name string, yield func(arrow.RecordBatch, error) bool) bool {
	for _, g := range groups {
		n := int(pf.MetaData().RowGroup(g).NumRows())
		for off := 0; off < n; off += 8192 {
			rec, err := s.folderRows(cols, name, min(8192, n-off))
			if err != nil {
				yield(nil, fmt.Errorf("%w: %s: %v", errSplitInput, name, err))
				return false
			}
			if !yield(rec, nil) {
				return false
			}
		}
	}
	return true
}

// folderRows is n rows of cols, all from name's folders.
func (s *filesSource) folderRows(cols []string, name string, n int) (arrow.RecordBatch, error) {
	parts := hiveParts(name)
	fields := make([]arrow.Field, len(cols))
	arrs := make([]arrow.Array, len(cols))
	for i, c := range cols {
		v, _ := partValue(parts, c)
		fields[i] = partitionField(c, s.dateCol)
		a, err := partitionColumn(fields[i], v, n)
		if err != nil {
			return nil, err
		}
		defer a.Release()
		arrs[i] = a
	}
	return array.NewRecordBatch(arrow.NewSchema(fields, nil), arrs, int64(n)), nil
}

// assemble is a batch of the file's columns with the folder columns of
// cols added, in the order of cols.
func (s *filesSource) assemble(rec arrow.RecordBatch, cols []string, fileCols map[string]bool, name string) (arrow.RecordBatch, error) {
	if len(fileCols) == len(cols) {
		rec.Retain()
		return rec, nil
	}
	n := int(rec.NumRows())
	parts := hiveParts(name)
	fields := make([]arrow.Field, len(cols))
	arrs := make([]arrow.Array, len(cols))
	for i, c := range cols {
		if fileCols[c] {
			idx := rec.Schema().FieldIndices(c)
			fields[i], arrs[i] = rec.Schema().Field(idx[0]), rec.Column(idx[0])
			arrs[i].Retain()
		} else {
			v, _ := partValue(parts, c)
			fields[i] = partitionField(c, s.dateCol)
			a, err := partitionColumn(fields[i], v, n)
			if err != nil {
				return nil, err
			}
			arrs[i] = a
		}
	}
	defer func() {
		for _, a := range arrs {
			a.Release()
		}
	}()
	return array.NewRecordBatch(arrow.NewSchema(fields, nil), arrs, int64(n)), nil
}

// columns checks that the file (its columns and folders, sch) has cols
// with the first file's types and returns the Parquet leaf columns of
// those the file holds, which of cols it holds, and the date column's
// field index in the file (-1: from a folder or not read).
func (s *filesSource) columns(fr *pqarrow.FileReader, fsch, sch *arrow.Schema, cols []string, name string) ([]int, map[string]bool, int, error) {
	var leaves []int
	fileCols := map[string]bool{}
	dateIdx := -1
	for _, c := range cols {
		idx := sch.FieldIndices(c)
		want, _ := s.want.FieldsByName(c)
		if len(idx) == 0 {
			return nil, nil, 0, fmt.Errorf("%w: %s has no column %q", errSplitInput, name, c)
		}
		if got := sch.Field(idx[0]).Type; len(want) > 0 && !arrow.TypeEqual(got, want[0].Type) {
			return nil, nil, 0, fmt.Errorf("%w: %s: column %q is %s, but %s in %s", errSplitInput, name, c, got, want[0].Type, s.files[0].Name)
		}
		fidx := fsch.FieldIndices(c)
		if len(fidx) == 0 {
			continue // a folder's
		}
		fileCols[c] = true
		if c == s.dateCol {
			dateIdx = fidx[0]
		}
		leaves = appendLeaves(leaves, fr.Manifest.Fields[fidx[0]])
	}
	return leaves, fileCols, dateIdx, nil
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
			if lo, hi, ok := groupDays(pf.MetaData().RowGroup(g), leaf, fields[dateIdx].Field.Type, s.loc); ok &&
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
// say it holds (a timestamp's days in loc: the day is monotone in time).
func groupDays(rg *metadata.RowGroupMetaData, leaf int, t arrow.DataType, loc *time.Location) (lo, hi backfill.Day, ok bool) {
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
			z := zoneOf(tt, loc)
			return dayIn(v.Min(), tt.Unit, z), dayIn(v.Max(), tt.Unit, z), true
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

// days is the date column of rec as date32, a timestamp's day in the
// split's zone.
func (s *filesSource) days(rec arrow.RecordBatch) (arrow.Array, error) {
	idx := rec.Schema().FieldIndices(s.dateCol)
	if len(idx) == 0 {
		return nil, fmt.Errorf("no date column %q", s.dateCol)
	}
	col := rec.Column(idx[0])
	if col.DataType().ID() == arrow.DATE32 {
		col.Retain()
		return col, nil
	}
	d, err := toDate32(col, s.loc)
	if err != nil {
		return nil, fmt.Errorf("date column %q: %w", s.dateCol, err)
	}
	return d, nil
}

// normalize returns rec with its date column as date32 (days, when the
// caller has them already): the record the split's converter reads
// whatever the file's date type.
func (s *filesSource) normalize(rec arrow.RecordBatch, days arrow.Array) (arrow.RecordBatch, error) {
	idx := rec.Schema().FieldIndices(s.dateCol)
	cols := slices.Clone(rec.Columns())
	fields := slices.Clone(rec.Schema().Fields())
	if len(idx) > 0 && cols[idx[0]].DataType().ID() != arrow.DATE32 {
		if days == nil {
			d, err := s.days(rec)
			if err != nil {
				return nil, err
			}
			defer d.Release()
			days = d
		}
		cols[idx[0]] = days
		fields[idx[0]].Type = arrow.FixedWidthTypes.Date32
	}
	return array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, rec.NumRows()), nil
}
