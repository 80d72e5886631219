package lake

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"
)

// PartitionBatch is a record batch whose rows all lie in one partition of
// the table being written. Values names the partition by source column,
// as Partition.Values does (days for a date, the bucket number for a
// bucket), so a job that reads a partition of one table can write the
// same partition of another without computing it again per row.
type PartitionBatch struct {
	Values map[string]int64
	Record arrow.RecordBatch
}

// WritePartitions writes batches that each belong to one partition (see
// PartitionBatch) as data files of tbl and returns them without
// committing anything, like WriteFiles. Consecutive batches of one
// partition go to one file; a partition must not come back once another
// has started (the input is clustered, as a partition-by-partition read
// is). Unlike WriteFiles, nothing is split or sorted again: the batches
// go straight to the Parquet writer, and the files of different
// partitions are encoded concurrently (one goroutine per open file, at
// most one per CPU) while the caller produces the next partition's rows.
// Files do not roll over at the table's target file size: one file per
// partition per call, row groups capped by write.parquet.row-group-limit
// (a partition of the jobs here is a day x bucket, megabytes to a few
// hundred). Each batch is released. schema must be tbl's Arrow schema with field
// ids (table.SchemaToArrowSchema with field ids), or a prefix-compatible
// projection of it.
func WritePartitions(ctx context.Context, tbl *table.Table, schema *arrow.Schema, batches iter.Seq2[PartitionBatch, error]) ([]iceberg.DataFile, error) {
	w, err := newPartitionWriter(ctx, tbl, schema)
	if err != nil {
		return nil, fmt.Errorf("write data files of %s: %w", Name(tbl.Identifier()), err)
	}
	files, err := w.run(batches)
	if err != nil {
		return nil, fmt.Errorf("write data files of %s: %w", Name(tbl.Identifier()), err)
	}
	return files, nil
}

type partitionWriter struct {
	ctx    context.Context
	tbl    *table.Table
	schema *arrow.Schema
	fields []PartitionField
	fs     icebergio.WriteFileIO
	props  fileProps
	prefix string // data location of the table
	write  string // this write's id, in file names
	slots  chan struct{}
	// uploads bounds the files whose encoding is done and whose upload
	// (the S3 writer's Close) is still in flight. A slot is one CPU's
	// encoding; an upload is a wait on the object store, so holding a
	// slot through it left one PUT in flight per core: at S3's 20 ms
	// per request, 64 small files took 64/2 round trips.
	uploads chan struct{}

	mu    sync.Mutex
	files []iceberg.DataFile
	errs  []error
	wg    sync.WaitGroup
	seen  map[string]bool
	count int
}

func newPartitionWriter(ctx context.Context, tbl *table.Table, schema *arrow.Schema) (*partitionWriter, error) {
	if err := checkFieldIDs(tbl.Schema(), schema); err != nil {
		return nil, err
	}
	fields, err := SpecFields(tbl.Schema(), tbl.Spec())
	if err != nil {
		return nil, err
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	wfs, ok := fs.(icebergio.WriteFileIO)
	if !ok {
		return nil, fmt.Errorf("file IO cannot write")
	}
	var identifiers []string
	for _, id := range tbl.Schema().IdentifierFieldIDs {
		if n, ok := tbl.Schema().FindColumnName(id); ok {
			identifiers = append(identifiers, n)
		}
	}
	// The writer's buffers (pages, dictionaries, compression) come from
	// the caller's pool when the context carries one
	// (compute.WithAllocator), else from a pool of this write's own.
	mem, ok := compute.GetAllocator(ctx).(*PoolAllocator)
	if !ok {
		mem = NewPoolAllocator()
	}
	props, err := newFileProps(tbl.Properties(), schema, identifiers, mem)
	if err != nil {
		return nil, err
	}
	return &partitionWriter{
		ctx: ctx, tbl: tbl, schema: schema, fields: fields, fs: wfs, props: props,
		prefix:  strings.TrimRight(tbl.Location(), "/") + "/data/",
		write:   uuid.NewString(),
		slots:   make(chan struct{}, max(1, runtime.GOMAXPROCS(0))),
		uploads: make(chan struct{}, uploadsInFlight),
		seen:    map[string]bool{},
	}, nil
}

// checkFieldIDs checks that every column of schema carries the field id
// of tbl's column of that name: the ids are what readers resolve columns
// by, so a file written without them would be unreadable as this table.
func checkFieldIDs(want *iceberg.Schema, schema *arrow.Schema) error {
	for _, f := range schema.Fields() {
		tf, ok := want.FindFieldByName(f.Name)
		if !ok {
			return fmt.Errorf("column %s is not in the table", f.Name)
		}
		id, ok := f.Metadata.GetValue("PARQUET:field_id")
		if !ok || id != strconv.Itoa(tf.ID) {
			return fmt.Errorf("column %s: Arrow field id %q, table's is %d (build the schema with field ids)", f.Name, id, tf.ID)
		}
	}
	return nil
}

func (w *partitionWriter) fail(err error) {
	w.mu.Lock()
	w.errs = append(w.errs, err)
	w.mu.Unlock()
}

func (w *partitionWriter) failed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.errs) > 0
}

func (w *partitionWriter) run(batches iter.Seq2[PartitionBatch, error]) ([]iceberg.DataFile, error) {
	var cur chan arrow.RecordBatch
	var curKey string
	closeCur := func() {
		if cur != nil {
			close(cur)
			cur = nil
		}
	}
	var err error
	for b, berr := range batches {
		if berr != nil {
			err = berr
			break
		}
		if w.failed() {
			b.Record.Release()
			break
		}
		key, kerr := w.key(b.Values)
		if kerr != nil {
			b.Record.Release()
			err = kerr
			break
		}
		if cur == nil || key != curKey {
			closeCur()
			if w.seen[key] {
				b.Record.Release()
				err = fmt.Errorf("partition %s comes back after another: batches must arrive partition by partition", key)
				break
			}
			w.seen[key] = true
			data, derr := w.partitionData(b.Values)
			if derr != nil {
				b.Record.Release()
				err = derr
				break
			}
			cur, curKey = make(chan arrow.RecordBatch, 8), key
			w.start(cur, data)
		}
		cur <- b.Record
	}
	closeCur()
	w.wg.Wait()
	if err != nil {
		w.errs = append([]error{err}, w.errs...)
	}
	if len(w.errs) > 0 {
		// Files already written are orphans nobody commits; a later
		// cleanup removes them.
		return nil, errors.Join(w.errs...)
	}
	return w.files, nil
}

// start writes one partition's batches, arriving on in, into a file, on
// its own goroutine once a slot is free.
func (w *partitionWriter) start(in chan arrow.RecordBatch, data partitionData) {
	w.count++
	dir := w.prefix
	if data.path != "" {
		dir += data.path + "/"
	}
	path := fmt.Sprintf("%s%05d-%s.parquet", dir, w.count, w.write)
	w.wg.Add(1)
	w.slots <- struct{}{}
	go func() {
		defer w.wg.Done()
		var release sync.Once
		free := func() { release.Do(func() { <-w.slots }) }
		defer free()
		df, err := w.writeFile(path, data, in, free)
		if err != nil {
			for rec := range in {
				rec.Release()
			}
			w.fail(fmt.Errorf("file %s: %w", path, err))
			return
		}
		w.mu.Lock()
		w.files = append(w.files, df)
		w.mu.Unlock()
	}()
}

func (w *partitionWriter) writeFile(path string, data partitionData, in <-chan arrow.RecordBatch, encoded func()) (iceberg.DataFile, error) {
	out, err := w.fs.Create(path)
	if err != nil {
		return nil, err
	}
	counter := &countingWriter{w: out, beforeClose: func() {
		// Encoded: let the next partition's encoding start, and wait
		// for the upload among at most uploadsInFlight others.
		encoded()
		w.uploads <- struct{}{}
	}, afterClose: func() { <-w.uploads }}
	// The first batch shows which columns come in runs (see runColumns).
	first, ok := <-in
	runs := map[string]bool{}
	if ok {
		runs = runColumns(first)
	}
	pw, err := pqarrow.NewFileWriter(w.schema, counter, w.props.forFile(runs), w.props.arrow)
	if err != nil {
		if ok {
			first.Release()
		}
		out.Close()
		return nil, err
	}
	var werr error
	if ok {
		werr = w.writeBatch(pw, first)
		first.Release()
	}
	for rec := range in {
		if werr == nil {
			werr = w.writeBatch(pw, rec)
		}
		rec.Release()
	}
	if werr != nil {
		pw.Close()
		return nil, werr
	}
	// Close flushes the last row group and writes the footer, and closes
	// the file it was given.
	if err := pw.Close(); err != nil {
		return nil, err
	}
	meta, err := pw.FileMetadata()
	if err != nil {
		return nil, err
	}
	return table.DataFileFromMetadata(table.DataFileArgs{
		Schema: w.tbl.Schema(), Spec: w.tbl.Spec(), Format: iceberg.ParquetFile, Metadata: meta,
		FilePath: path, FileSize: counter.n, Content: iceberg.EntryContentData,
		PartitionValues: data.values, Properties: w.tbl.Properties(), FormatVersion: w.tbl.Metadata().Version(),
	})
}

// writeBatch appends a batch to the file's current row group, starting a
// new one when the row group would pass the row limit.
func (w *partitionWriter) writeBatch(pw *pqarrow.FileWriter, rec arrow.RecordBatch) error {
	if n, err := pw.RowGroupNumRows(); err == nil && n > 0 && int64(n)+rec.NumRows() > w.props.rowGroupRows {
		if err := pw.NewBufferedRowGroupChecked(); err != nil {
			return err
		}
	}
	return pw.WriteBuffered(rec)
}

// uploadsInFlight is how many finished files' uploads a write waits on at
// once, sized for S3's latency (20 ms per request keeps 16 PUTs of small
// files well under a core's encoding rate), not for the CPU.
const uploadsInFlight = 16

type countingWriter struct {
	w interface {
		Write([]byte) (int, error)
		Close() error
	}
	n int64
	// beforeClose and afterClose, when set, bracket the sink's Close
	// (for an S3 writer: the upload).
	beforeClose, afterClose func()
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func (c *countingWriter) Close() error {
	if c.beforeClose != nil {
		c.beforeClose()
	}
	if c.afterClose != nil {
		defer c.afterClose()
	}
	return c.w.Close()
}

// key is a partition's identity within one write.
func (w *partitionWriter) key(values map[string]int64) (string, error) {
	var b strings.Builder
	for _, f := range w.fields {
		v, ok := values[f.Source]
		if !ok {
			return "", fmt.Errorf("batch has no value for partition column %s", f.Source)
		}
		b.WriteString(strconv.FormatInt(v, 10))
		b.WriteByte('/')
	}
	return b.String(), nil
}

// partitionData is a partition's tuple by field id, as a manifest holds
// it, and its folder under data/.
type partitionData struct {
	values map[int]any
	path   string
}

type partitionTuple []any

func (t partitionTuple) Size() int        { return len(t) }
func (t partitionTuple) Get(i int) any    { return t[i] }
func (t partitionTuple) Set(i int, v any) { t[i] = v }

func (w *partitionWriter) partitionData(values map[string]int64) (partitionData, error) {
	spec := w.tbl.Spec()
	schema := w.tbl.Schema()
	data := partitionData{values: map[int]any{}}
	var tuple partitionTuple
	i := 0
	for _, f := range spec.Fields() {
		v := values[w.fields[i].Source]
		i++
		src, ok := schema.FindFieldByID(f.SourceID())
		if !ok {
			return data, fmt.Errorf("partition field %s: no source column %d", f.Name, f.SourceID())
		}
		var pv any
		switch t := f.Transform.ResultType(src.Type).(type) {
		case iceberg.DateType:
			pv = iceberg.Date(v)
		case iceberg.Int32Type:
			pv = int32(v)
		case iceberg.Int64Type:
			pv = v
		default:
			return data, fmt.Errorf("partition field %s: values of type %s are not supported here", f.Name, t)
		}
		data.values[f.FieldID] = pv
		tuple = append(tuple, pv)
	}
	data.path = spec.PartitionToPath(tuple, schema)
	return data, nil
}
