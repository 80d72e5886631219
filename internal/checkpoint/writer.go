package checkpoint

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/format"
	"github.com/retrain-ml/retrain/internal/s3store"
)

// Writer collects the datasets of one attempt at a step. [Do] creates it and
// commits what was written to it when the step returns.
type Writer struct {
	ctx     context.Context
	store   *s3store.Store
	key     Key
	inputs  string
	attempt string
	dir     string // the checkpoint's folder
	// part names a part's files (NewPart): part files are downloaded side
	// by side, so their base names must differ between parts.
	part string
	log  *slog.Logger

	mu        sync.Mutex
	datasets  map[string]Dataset // closed
	open      map[string]aborter // created, not closed yet
	committed bool
}

// aborter is the part of a DatasetWriter the Writer needs to clean up after
// a failed step, whatever the dataset's row type.
type aborter interface{ abort(error) }

func newWriter(ctx context.Context, store *s3store.Store, key Key, inputs string) *Writer {
	var b [4]byte
	rand.Read(b[:])
	attempt := time.Now().UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
	return &Writer{
		ctx:      ctx,
		store:    store,
		key:      key,
		inputs:   inputs,
		attempt:  attempt,
		dir:      key.dir(inputs),
		log:      store.Logger().With("checkpoint", key.String(), "inputs", inputs, "attempt", attempt),
		datasets: make(map[string]Dataset),
		open:     make(map[string]aborter),
	}
}

// Key returns the step the Writer writes for.
func (w *Writer) Key() Key { return w.key }

// Ref returns a reference to the dataset called name of this checkpoint,
// valid once the checkpoint is committed. Steps usually return the Refs of
// their datasets as (part of) their outputs.
func (w *Writer) Ref(name string) Ref {
	return Ref{Manifest: w.dir + manifestName, Dataset: name}
}

// Ref locates a dataset of a committed checkpoint. It is what a step hands
// to the steps that read its data; it is plain JSON.
type Ref struct {
	Manifest string `json:"manifest"` // key of the manifest in the Store
	Dataset  string `json:"dataset"`
}

// Options tune how a dataset is written.
type Options struct {
	// Compression is the Parquet codec. Default none: checkpoints live for
	// days and are read back soon, so the CPU time of the step matters more
	// than bytes stored. Measured on this package's benchmark, Snappy as
	// parquet-go implements it costs three times the encoding itself; Zstd
	// at its fastest level compresses better for less.
	Compression compress.Codec
	// MaxFileBytes starts a new file once a file reaches about this size
	// (before compression of the last row group). Default 128 MiB.
	MaxFileBytes int64
	// MaxFileRows starts a new file after this many rows. Default unlimited.
	MaxFileRows int64
	// RowGroupBytes bounds the uncompressed size of a row group, which is
	// what a writer holds in memory. A row group is only written out when
	// complete, so smaller ones let the upload start sooner and overlap
	// the encoding more. Default 8 MiB.
	RowGroupBytes int64
}

const (
	defaultMaxFileBytes  = 128 << 20
	defaultRowGroupBytes = 8 << 20
	// writeChunk is how many rows are handed to Parquet between size checks.
	writeChunk = 4096
)

// DatasetWriter streams rows of type T into the Parquet files of one dataset.
// Each file is uploaded while it is being encoded. A DatasetWriter is not
// safe for concurrent use; different datasets may be written concurrently.
type DatasetWriter[T any] struct {
	w    *Writer
	name string
	opts Options

	schema   *parquet.Schema
	explicit bool // schema given, not derived from T: pass it to the writer
	started  int  // files started, which numbers them
	files    []File
	rows     int64
	cur      *fileWriter[T] // being encoded
	pending  *fileWriter[T] // encoded, upload finishing
	err      error          // sticky: once failed, the dataset cannot be completed
}

// fileWriter is one Parquet file being encoded into a pipe that an upload
// drains.
type fileWriter[T any] struct {
	key     string
	groups  []RowGroup // once the file is closed
	pw      *parquet.GenericWriter[T]
	pipe    *io.PipeWriter
	written *countingWriter
	rows    int64
	done    chan upload
}

type upload struct {
	info s3store.ObjectInfo
	err  error
}

// Create starts the dataset called name in w, with rows of Go type T (a
// struct). Names are single path segments, unique within a checkpoint.
func Create[T any](w *Writer, name string, opts ...Options) (*DatasetWriter[T], error) {
	return create[T](w, name, parquet.SchemaOf(new(T)), false, opts)
}

// RowWriter writes a dataset whose schema is only known at run time (the
// columns of a CSV file, the schema of a Parquet file) with
// [DatasetWriter.WriteRows].
type RowWriter = DatasetWriter[any]

// CreateRows starts the dataset called name in w with the given schema.
// Its rows are written as parquet.Row values with [DatasetWriter.WriteRows]
// and must follow the schema's column order.
func CreateRows(w *Writer, name string, schema *parquet.Schema, opts ...Options) (*RowWriter, error) {
	if schema == nil || len(schema.Columns()) == 0 {
		return nil, fmt.Errorf("checkpoint: dataset %q: schema has no columns", name)
	}
	return create[any](w, name, schema, true, opts)
}

func create[T any](w *Writer, name string, schema *parquet.Schema, explicit bool, opts []Options) (*DatasetWriter[T], error) {
	if err := validateSegment(name); err != nil {
		return nil, fmt.Errorf("checkpoint: dataset name: %w", err)
	}
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.Compression == nil {
		o.Compression = &parquet.Uncompressed
	}
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = defaultMaxFileBytes
	}
	if o.RowGroupBytes <= 0 {
		o.RowGroupBytes = defaultRowGroupBytes
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.committed {
		return nil, errors.New("checkpoint: Create after the step returned")
	}
	if _, dup := w.datasets[name]; dup {
		return nil, fmt.Errorf("checkpoint: dataset %q already written", name)
	}
	if _, dup := w.open[name]; dup {
		return nil, fmt.Errorf("checkpoint: dataset %q already being written", name)
	}
	d := &DatasetWriter[T]{w: w, name: name, opts: o, schema: schema, explicit: explicit}
	w.open[name] = d
	return d, nil
}

// Schema returns the dataset's Parquet schema.
func (d *DatasetWriter[T]) Schema() *parquet.Schema { return d.schema }

// Write appends rows to the dataset.
func (d *DatasetWriter[T]) Write(rows []T) (int, error) {
	return write(d, rows, (*parquet.GenericWriter[T]).Write)
}

// WriteRows appends rows given as parquet.Row values in the dataset's
// schema; it is how a [RowWriter] is written.
func (d *DatasetWriter[T]) WriteRows(rows []parquet.Row) (int, error) {
	return write(d, rows, (*parquet.GenericWriter[T]).WriteRows)
}

// write hands rows to the current file's encoder in chunks, starting and
// finishing files as they fill up. encode is a method expression because
// the current file's encoder changes between chunks.
func write[T, R any](d *DatasetWriter[T], rows []R, encode func(*parquet.GenericWriter[T], []R) (int, error)) (int, error) {
	if d.err != nil {
		return 0, d.err
	}
	written := 0
	for len(rows) > 0 {
		if d.cur == nil {
			if err := d.startFile(); err != nil {
				return written, d.fail(err)
			}
		}
		chunk := rows[:min(len(rows), writeChunk)]
		if d.opts.MaxFileRows > 0 {
			chunk = chunk[:min(int64(len(chunk)), d.opts.MaxFileRows-d.cur.rows)]
		}
		n, err := encode(d.cur.pw, chunk)
		d.cur.rows += int64(n)
		d.rows += int64(n)
		written += n
		rows = rows[n:]
		if err != nil {
			return written, d.fail(err)
		}
		if err := d.maybeRoll(); err != nil {
			return written, d.fail(err)
		}
	}
	return written, nil
}

// maybeRoll flushes the row group or finishes the file when they are big
// enough.
func (d *DatasetWriter[T]) maybeRoll() error {
	f := d.cur
	size := f.pw.Size()
	switch {
	case size >= d.opts.MaxFileBytes, d.opts.MaxFileRows > 0 && f.rows >= d.opts.MaxFileRows:
		return d.finishFile()
	case size-f.written.n >= d.opts.RowGroupBytes:
		return f.pw.Flush()
	}
	return nil
}

func (d *DatasetWriter[T]) startFile() error {
	name := d.name
	if d.w.part != "" {
		name += "-" + d.w.part
	}
	key := fmt.Sprintf("%s%s/%s-%05d.parquet", d.w.dir, d.w.attempt, name, d.started)
	d.started++
	pr, pw := io.Pipe()
	f := &fileWriter[T]{key: key, pipe: pw, done: make(chan upload, 1)}
	f.written = &countingWriter{w: pw}
	f.pw = parquet.NewGenericWriter[T](f.written, d.writerOptions()...)
	go func() {
		info, err := d.w.store.Put(d.w.ctx, key, pr)
		// Unblocks the encoder if the upload stopped reading early.
		pr.CloseWithError(cmp.Or(err, io.ErrClosedPipe))
		f.done <- upload{info, err}
	}()
	d.cur = f
	return nil
}

func (d *DatasetWriter[T]) writerOptions() []parquet.WriterOption {
	opts := []parquet.WriterOption{
		parquet.Compression(d.opts.Compression),
		// Fewer, larger writes into the pipe: each one is a goroutine
		// hand-off to the uploader.
		parquet.WriteBufferSize(1 << 20),
		parquet.CreatedBy("retrain", "", ""),
		// Page statistics and bounds serve predicate push-down; a
		// checkpoint is always read whole. Computing them is most of the
		// encoding time for string columns (measured: 0.6s of 0.8s per
		// million rows of the benchmark's rows).
		parquet.DataPageStatistics(false),
	}
	for _, path := range d.schema.Columns() {
		opts = append(opts, parquet.SkipPageBounds(path...))
	}
	if d.explicit {
		opts = append(opts, d.schema)
	}
	return opts
}

// finishFile writes the Parquet footer and leaves the upload to finish
// while the next file is encoded; at most one upload finishes in the
// background, which bounds memory.
func (d *DatasetWriter[T]) finishFile() error {
	f := d.cur
	d.cur = nil
	if err := f.pw.Close(); err != nil {
		f.pipe.CloseWithError(err)
		<-f.done
		return fmt.Errorf("checkpoint: encode %s: %w", f.key, err)
	}
	f.pipe.Close()
	f.groups = rowGroups(f.pw.File().Metadata())
	if err := d.waitPending(); err != nil {
		<-f.done
		return err
	}
	d.pending = f
	return nil
}

// waitPending waits for the upload of the previous file and records it.
func (d *DatasetWriter[T]) waitPending() error {
	f := d.pending
	if f == nil {
		return nil
	}
	d.pending = nil
	up := <-f.done
	if up.err != nil {
		return fmt.Errorf("checkpoint: upload %s: %w", f.key, up.err)
	}
	d.files = append(d.files, File{Key: f.key, Rows: f.rows, Size: up.info.Size, CRC32C: up.info.CRC32C, RowGroups: f.groups})
	d.w.log.DebugContext(d.w.ctx, "checkpoint: file written", "key", f.key, "rows", f.rows, "bytes", up.info.Size)
	return nil
}

// Close finishes the dataset and returns its Ref. A dataset with no rows
// still gets one (empty) file, which records its schema.
func (d *DatasetWriter[T]) Close() (Ref, error) {
	if d.err != nil {
		return Ref{}, d.err
	}
	if d.cur == nil && d.pending == nil && len(d.files) == 0 {
		if err := d.startFile(); err != nil {
			return Ref{}, d.fail(err)
		}
	}
	if d.cur != nil {
		if err := d.finishFile(); err != nil {
			return Ref{}, d.fail(err)
		}
	}
	if err := d.waitPending(); err != nil {
		return Ref{}, d.fail(err)
	}
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.open, d.name)
	w.datasets[d.name] = Dataset{Name: d.name, Schema: d.schema.String(), Columns: ColumnsOf(d.schema), Rows: d.rows, Files: d.files}
	d.err = errors.New("checkpoint: dataset already closed")
	return w.Ref(d.name), nil
}

// fail makes err sticky and stops the file being uploaded, if any.
func (d *DatasetWriter[T]) fail(err error) error {
	d.abort(err)
	return err
}

func (d *DatasetWriter[T]) abort(err error) {
	if d.err == nil {
		d.err = err
	}
	if f := d.cur; f != nil {
		d.cur = nil
		// An upload that ends with an error aborts its multipart upload,
		// so nothing of this file becomes visible.
		f.pipe.CloseWithError(err)
		<-f.done
	}
	if f := d.pending; f != nil {
		d.pending = nil
		<-f.done // complete already; the attempt's files are discarded
	}
}

// WriteAll writes rows as the dataset called name and closes it.
func WriteAll[T any](w *Writer, name string, rows []T, opts ...Options) (Ref, error) {
	d, err := Create[T](w, name, opts...)
	if err != nil {
		return Ref{}, err
	}
	if _, err := d.Write(rows); err != nil {
		return Ref{}, err
	}
	return d.Close()
}

// abort stops every dataset still being written.
func (w *Writer) abort(err error) {
	w.mu.Lock()
	open := make([]aborter, 0, len(w.open))
	for _, a := range w.open {
		open = append(open, a)
	}
	w.open = map[string]aborter{}
	w.committed = true
	w.mu.Unlock()
	for _, a := range open {
		a.abort(err)
	}
}

// seal ends writing and returns the datasets, sorted by name.
func (w *Writer) seal() ([]Dataset, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.committed = true
	if len(w.open) > 0 {
		var names []string
		for n := range w.open {
			names = append(names, n)
		}
		slices.Sort(names)
		return nil, fmt.Errorf("checkpoint: step returned without closing dataset(s) %q", names)
	}
	var ds []Dataset
	for _, d := range w.datasets {
		ds = append(ds, d)
	}
	slices.SortFunc(ds, func(a, b Dataset) int { return cmp.Compare(a.Name, b.Name) })
	return ds, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// rowGroups are the row groups a file's footer records, with the byte
// range of each one's column chunks; nil when the footer lacks what it
// takes (the manifest then records none).
func rowGroups(md *format.FileMetaData) []RowGroup {
	if md == nil {
		return nil
	}
	var out []RowGroup
	for _, rg := range md.RowGroups {
		lo, hi := int64(-1), int64(0)
		for _, c := range rg.Columns {
			m := c.MetaData
			start := m.DataPageOffset
			if m.DictionaryPageOffset > 0 && m.DictionaryPageOffset < start {
				start = m.DictionaryPageOffset
			}
			if start <= 0 || m.TotalCompressedSize <= 0 {
				return nil
			}
			if lo < 0 || start < lo {
				lo = start
			}
			hi = max(hi, start+m.TotalCompressedSize)
		}
		if lo < 0 {
			return nil
		}
		out = append(out, RowGroup{Rows: rg.NumRows, Offset: lo, Size: hi - lo})
	}
	return out
}
