package checkpoint

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"

	"github.com/parquet-go/parquet-go"
	"github.com/retrain-ml/retrain/internal/s3store"
)

// spoolInMemory is the largest file a Reader downloads into memory; larger
// ones go to an unlinked temporary file. Parquet keeps its index at the end
// of a file, so a file must be fully downloaded, and verified, before its
// first row can be decoded.
const spoolInMemory = 64 << 20

// Reader streams the rows of a dataset back, verifying every file's size and
// CRC32C against the manifest before decoding it, and each file's and the
// dataset's row counts at their ends. While one file is decoded the next is
// downloaded.
type Reader[T any] struct {
	ds     Dataset
	cancel context.CancelFunc
	files  chan fetched

	cur     *parquet.GenericReader[T]
	schema  *parquet.Schema // of the file being read, or last read
	curFile File
	curBody io.Closer
	curRows int64
	rows    int64
	done    bool
	err     error
}

type fetched struct {
	file File
	body readerAtCloser
	err  error
}

type readerAtCloser interface {
	io.ReaderAt
	io.Closer
}

// Open starts reading the dataset ref points to. The Reader must be closed.
func Open[T any](ctx context.Context, store *s3store.Store, ref Ref) (*Reader[T], error) {
	if err := s3store.ValidateKey(ref.Manifest); err != nil {
		return nil, fmt.Errorf("checkpoint: open %s: %w", ref.Dataset, err)
	}
	m, err := loadManifest(ctx, store, ref.Manifest)
	if err != nil {
		return nil, err
	}
	ds, ok := m.Dataset(ref.Dataset)
	if !ok {
		return nil, fmt.Errorf("%w: checkpoint %s has no dataset %q", ErrNotFound, ref.Manifest, ref.Dataset)
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &Reader[T]{ds: ds, cancel: cancel, files: make(chan fetched, 1)}
	go prefetch(ctx, store, ds.Files, r.files)
	return r, nil
}

// Dataset returns the manifest entry of the dataset being read.
func (r *Reader[T]) Dataset() Dataset { return r.ds }

// Read reads up to len(rows) rows. At the end of the dataset it returns
// io.EOF, and only after the row count matched the manifest.
func (r *Reader[T]) Read(rows []T) (int, error) {
	return read(r, rows, (*parquet.GenericReader[T]).Read)
}

// ReadRows is Read into parquet.Row values, in the columns of the file
// they came from ([Reader.Schema]): no value of T is built, and the rows'
// value slices are reused, so a caller that converts rows into its own
// columns allocates far less than with Read. The rows of one call come
// from one file.
func (r *Reader[T]) ReadRows(rows []parquet.Row) (int, error) {
	return read(r, rows, (*parquet.GenericReader[T]).ReadRows)
}

// Schema is the schema of the file the last rows read came from (nil
// before the first read).
func (r *Reader[T]) Schema() *parquet.Schema { return r.schema }

// read is Read and ReadRows: decode is a method expression because the
// current file's decoder changes between files.
func read[T, R any](r *Reader[T], rows []R, decode func(*parquet.GenericReader[T], []R) (int, error)) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	for {
		if r.cur == nil {
			if err := r.next(); err != nil {
				r.err = err
				return 0, err
			}
		}
		n, err := decode(r.cur, rows)
		r.curRows += int64(n)
		r.rows += int64(n)
		if err == io.EOF {
			err = r.endFile()
		}
		if err != nil {
			r.err = err
			return n, err
		}
		if n > 0 || len(rows) == 0 {
			return n, nil
		}
	}
}

// next opens the next file, or returns io.EOF after the last one.
func (r *Reader[T]) next() error {
	f, ok := <-r.files
	if !ok {
		if r.rows != r.ds.Rows {
			return fmt.Errorf("%w: dataset %s has %d rows, manifest says %d", ErrCorrupt, r.ds.Name, r.rows, r.ds.Rows)
		}
		r.done = true
		return io.EOF
	}
	if f.err != nil {
		return f.err
	}
	pf, err := parquet.OpenFile(f.body, f.file.Size)
	if err != nil {
		f.body.Close()
		return fmt.Errorf("%w: %s: %v", ErrCorrupt, f.file.Key, err)
	}
	r.cur = parquet.NewGenericReader[T](pf)
	r.schema = pf.Schema()
	r.curFile = f.file
	r.curBody = f.body
	r.curRows = 0
	return nil
}

func (r *Reader[T]) endFile() error {
	r.cur.Close()
	r.curBody.Close()
	r.cur, r.curBody = nil, nil
	if r.curRows != r.curFile.Rows {
		return fmt.Errorf("%w: %s has %d rows, manifest says %d", ErrCorrupt, r.curFile.Key, r.curRows, r.curFile.Rows)
	}
	return nil
}

// Close releases the Reader's downloads.
func (r *Reader[T]) Close() error {
	r.cancel()
	if r.cur != nil {
		r.cur.Close()
		r.curBody.Close()
		r.cur = nil
	}
	for f := range r.files {
		if f.body != nil {
			f.body.Close()
		}
	}
	if r.err == nil {
		r.err = errors.New("checkpoint: reader closed")
	}
	return nil
}

// ReadAll reads the whole dataset ref points to into memory.
func ReadAll[T any](ctx context.Context, store *s3store.Store, ref Ref) ([]T, error) {
	r, err := Open[T](ctx, store, ref)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	rows := make([]T, 0, r.ds.Rows)
	buf := make([]T, 1024)
	for {
		n, err := r.Read(buf)
		rows = append(rows, buf[:n]...)
		if err == io.EOF {
			return rows, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// prefetch downloads files in order, one ahead of the reader.
func prefetch(ctx context.Context, store *s3store.Store, files []File, out chan<- fetched) {
	defer close(out)
	for _, f := range files {
		body, err := download(ctx, store, f)
		select {
		case out <- fetched{file: f, body: body, err: err}:
		case <-ctx.Done():
			if body != nil {
				body.Close()
			}
			return
		}
		if err != nil {
			return
		}
	}
}

// download fetches f and checks it against the manifest: the Store checks
// the bytes against the server's checksum, and this function checks that
// checksum and the size against the manifest, which catches a file that was
// replaced after the checkpoint was committed.
func download(ctx context.Context, store *s3store.Store, f File) (readerAtCloser, error) {
	body, info, err := store.Get(ctx, f.Key)
	if errors.Is(err, s3store.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s is missing", ErrCorrupt, f.Key)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: read %s: %w", f.Key, err)
	}
	defer body.Close()
	if info.Size != f.Size {
		return nil, fmt.Errorf("%w: %s is %d bytes, manifest says %d", ErrCorrupt, f.Key, info.Size, f.Size)
	}
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	src := io.TeeReader(body, h)
	var dst readerAtCloser
	if f.Size <= spoolInMemory {
		buf := bytes.NewBuffer(make([]byte, 0, f.Size))
		if _, err := io.Copy(buf, src); err != nil {
			return nil, readErr(f, err)
		}
		dst = nopCloser{bytes.NewReader(buf.Bytes())}
	} else {
		tmp, err := os.CreateTemp("", "retrain-checkpoint-*.parquet")
		if err != nil {
			return nil, fmt.Errorf("checkpoint: spool %s: %w", f.Key, err)
		}
		// Unlinked at once: the space is freed when the file is closed,
		// however the process ends.
		os.Remove(tmp.Name())
		if _, err := io.Copy(tmp, src); err != nil {
			tmp.Close()
			return nil, readErr(f, err)
		}
		dst = tmp
	}
	// crc32's Sum is big-endian, the byte order S3 encodes checksums in.
	if got := base64.StdEncoding.EncodeToString(h.Sum(nil)); got != f.CRC32C {
		dst.Close()
		return nil, fmt.Errorf("%w: %s has CRC32C %s, manifest says %s", ErrCorrupt, f.Key, got, f.CRC32C)
	}
	return dst, nil
}

func readErr(f File, err error) error {
	if errors.Is(err, s3store.ErrChecksumMismatch) {
		return fmt.Errorf("%w: %s: %w", ErrCorrupt, f.Key, err)
	}
	return fmt.Errorf("checkpoint: read %s: %w", f.Key, err)
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }
