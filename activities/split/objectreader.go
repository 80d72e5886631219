package split

import (
	"context"
	"io"

	"github.com/retrain-ml/retrain/internal/s3store"
)

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
