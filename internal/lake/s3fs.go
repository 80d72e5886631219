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
	return w.Create(name)
}

func (f *s3FS) WriteFile(name string, p []byte) error {
	w, ok := f.inner.(icebergio.WriteFileIO)
	if !ok {
		return unsupported("write", name, f.inner)
	}
	return w.WriteFile(name, p)
}

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
