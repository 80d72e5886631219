package lake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// s3FS is a table's file IO on an S3 warehouse: reads through s3Reads
// (few round trips per file, immutable metadata from the catalog's cache),
// everything else through iceberg-go's own IO (inner), whose writes
// already upload large files in parts (gocloud's s3blob writer uses the
// SDK's transfer manager: 8 MiB parts above 16 MiB).
type s3FS struct {
	inner icebergio.IO
	ctx   context.Context
	r     *s3Reads
}

var (
	_ icebergio.ReadFileIO      = (*s3FS)(nil)
	_ icebergio.WriteFileIO     = (*s3FS)(nil)
	_ icebergio.ListableIO      = (*s3FS)(nil)
	_ icebergio.BulkRemovableIO = (*s3FS)(nil)
	_ icebergio.StatIO          = (*s3FS)(nil)
)

// splitS3 is the bucket and key of an s3:// (s3a, s3n) URI.
func splitS3(uri string) (bucket, key string, ok bool) {
	scheme, rest, found := strings.Cut(uri, "://")
	if !found || (scheme != "s3" && scheme != "s3a" && scheme != "s3n") {
		return "", "", false
	}
	bucket, key, found = strings.Cut(rest, "/")
	if !found || bucket == "" || key == "" {
		return "", "", false
	}
	return bucket, key, true
}

func (f *s3FS) Open(name string) (icebergio.File, error) {
	bucket, key, ok := splitS3(name)
	if !ok {
		return f.inner.Open(name)
	}
	return openS3File(f.ctx, f.r, name, bucket, key)
}

func (f *s3FS) ReadFile(name string) ([]byte, error) {
	file, err := f.Open(name)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	if sf, ok := file.(*s3File); ok && sf.whole != nil {
		return append([]byte(nil), sf.whole...), nil // callers may modify it
	}
	return io.ReadAll(file)
}

func (f *s3FS) Remove(name string) error {
	f.r.cache.drop(name)
	return f.inner.Remove(name)
}

func (f *s3FS) Create(name string) (icebergio.FileWriter, error) {
	w, ok := f.inner.(icebergio.WriteFileIO)
	if !ok {
		return nil, unsupported("create", name, f.inner)
	}
	fw, err := w.Create(name)
	if err != nil || f.r.cache == nil || !immutableFile(name) {
		return fw, err
	}
	return &teeWriter{FileWriter: fw, name: name, limit: f.r.cfg.WholeFileBytes, cache: f.r.cache}, nil
}

func (f *s3FS) WriteFile(name string, p []byte) error {
	w, ok := f.inner.(icebergio.WriteFileIO)
	if !ok {
		return unsupported("write", name, f.inner)
	}
	if err := w.WriteFile(name, p); err != nil {
		return err
	}
	if immutableFile(name) && int64(len(p)) <= f.r.cfg.WholeFileBytes {
		f.r.cache.put(name, append([]byte(nil), p...))
	}
	return nil
}

// teeWriter keeps a copy of what is written to an immutable file, up to
// limit bytes, and caches it once the file is complete: the next node
// reads it (stats what stage wrote, split what promote wrote) without a
// request.
type teeWriter struct {
	icebergio.FileWriter
	name  string
	limit int64
	cache *metaCache
	buf   []byte
	over  bool
}

func (t *teeWriter) keep(p []byte) {
	if t.over {
		return
	}
	if int64(len(t.buf)+len(p)) > t.limit {
		t.over, t.buf = true, nil
		return
	}
	t.buf = append(t.buf, p...)
}

func (t *teeWriter) Write(p []byte) (int, error) {
	n, err := t.FileWriter.Write(p)
	t.keep(p[:n])
	return n, err
}

func (t *teeWriter) ReadFrom(r io.Reader) (int64, error) {
	return t.FileWriter.ReadFrom(io.TeeReader(r, writerFunc(func(p []byte) (int, error) {
		t.keep(p)
		return len(p), nil
	})))
}

func (t *teeWriter) Close() error {
	if err := t.FileWriter.Close(); err != nil {
		return err
	}
	if !t.over {
		t.cache.put(t.name, t.buf)
	}
	t.buf = nil
	return nil
}

type writerFunc func([]byte) (int, error)

func (w writerFunc) Write(p []byte) (int, error) { return w(p) }

func (f *s3FS) WalkDir(root string, fn fs.WalkDirFunc) error {
	l, ok := f.inner.(icebergio.ListableIO)
	if !ok {
		return unsupported("walk", root, f.inner)
	}
	return l.WalkDir(root, fn)
}

func (f *s3FS) DeleteFiles(ctx context.Context, paths []string) ([]string, error) {
	for _, p := range paths {
		f.r.cache.drop(p)
	}
	if b, ok := f.inner.(icebergio.BulkRemovableIO); ok {
		return b.DeleteFiles(ctx, paths)
	}
	var deleted []string
	var errs []error
	for _, p := range paths {
		if err := f.inner.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		deleted = append(deleted, p)
	}
	return deleted, errors.Join(errs...)
}

func (f *s3FS) Stat(name string) (fs.FileInfo, error) {
	s, ok := f.inner.(icebergio.StatIO)
	if !ok {
		return nil, unsupported("stat", name, f.inner)
	}
	return s.Stat(name)
}

func unsupported(op, name string, inner icebergio.IO) error {
	return &fs.PathError{Op: op, Path: name, Err: fmt.Errorf("%w by file IO %T", errors.ErrUnsupported, inner)}
}

// Scan is tbl.Scan(opts...) with the read concurrency of the table's
// warehouse: on S3, ReadConfig.Concurrency data files at once (opts may
// still set WithMaxConcurrency themselves); elsewhere iceberg-go's
// default, GOMAXPROCS. iceberg-go has no table- or catalog-wide setting
// for it (upstream: a scan default taken from the table's FileIO or
// properties would let a catalog size it for its storage), so the scans
// that read much data go through here. It asks the table for its file IO
// (no request) to learn which warehouse it is on.
func Scan(ctx context.Context, tbl *table.Table, opts ...table.ScanOption) *table.Scan {
	if fsys, err := tbl.FS(ctx); err == nil {
		if s3, ok := fsys.(*s3FS); ok {
			opts = append([]table.ScanOption{table.WithMaxConcurrency(s3.r.cfg.Concurrency)}, opts...)
		}
	}
	return tbl.Scan(opts...)
}
