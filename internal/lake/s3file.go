package lake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// s3File is one open file of an S3 warehouse, read in as few round trips
// as its size allows. iceberg-go opens a data file with an unranged GET,
// then arrow-go reads the footer, the metadata and each column chunk with
// a ranged GET of its own (io/gocloud/blobfs ReadAt -> NewRangeReader):
// four or more sequential round trips per file, plus one per projected
// column chunk. Here the open is one suffix GET (TailBytes) that gives the
// size, the footer and the metadata, and, for most files retrain writes,
// the whole file; a file up to WholeFileBytes is completed with one more
// GET; a larger one serves its column chunks through a chunkReader that
// coalesces them.
//
// Upstream: iceberg-go knows each data file's size from its manifest
// entry (DataFile.FileSizeBytes) but its IO interface cannot take it
// (Java's FileIO.newInputFile(path, length) can); with it, a file up to
// WholeFileBytes would be one GET and a larger one's tail read could be
// sized exactly. arrow-go has no read coalescing or pre-buffering for a
// file (arrow-go issue 278), which is where chunk coalescing belongs.
type s3File struct {
	ctx    context.Context
	r      *s3Reads
	name   string // base name, for Stat
	bucket string
	key    string
	size   int64

	whole   []byte // the whole file, when read whole
	tail    []byte // otherwise its last bytes, from tailOff
	tailOff int64
	chunks  *chunkReader

	pos int64 // Read and Seek
}

// openS3File opens s3://bucket/key (uri) for reading.
func openS3File(ctx context.Context, r *s3Reads, uri, bucket, key string) (*s3File, error) {
	f := &s3File{ctx: ctx, r: r, name: path.Base(key), bucket: bucket, key: key}
	cacheable := immutableFile(uri)
	if cacheable {
		if data, ok := r.cache.get(uri); ok {
			f.whole, f.size = data, int64(len(data))
			return f, nil
		}
	}
	data, size, err := r.getRange(ctx, bucket, key, "bytes=-"+strconv.FormatInt(r.cfg.TailBytes, 10))
	if invalidRange(err) {
		// An empty object has no suffix to give.
		data, size, err = r.getRange(ctx, bucket, key, "")
	}
	if err != nil {
		return nil, openErr(uri, err)
	}
	switch rest := size - int64(len(data)); {
	case rest <= 0:
		f.whole = data
	case size <= r.cfg.WholeFileBytes:
		head, _, err := r.getRange(ctx, bucket, key, fmt.Sprintf("bytes=0-%d", rest-1))
		if err != nil {
			return nil, openErr(uri, err)
		}
		if int64(len(head)) != rest {
			return nil, openErr(uri, fmt.Errorf("got %d bytes of the first %d (object changed while read?)", len(head), rest))
		}
		f.whole = append(head, data...)
	default:
		f.tail, f.tailOff = data, rest
		f.chunks = &chunkReader{f: f}
	}
	f.size = size
	if cacheable && f.whole != nil {
		r.cache.put(uri, f.whole)
	}
	return f, nil
}

// openErr is err as iceberg-go's file IO reports it: a *fs.PathError, with
// fs.ErrNotExist for a missing object (callers test for it).
func openErr(uri string, err error) error {
	if nsk, ok := errors.AsType[*types.NoSuchKey](err); ok {
		return &fs.PathError{Op: "open", Path: uri, Err: fmt.Errorf("%w: %v", fs.ErrNotExist, nsk)}
	}
	if re, ok := errors.AsType[*smithyhttp.ResponseError](err); ok && re.HTTPStatusCode() == 404 {
		return &fs.PathError{Op: "open", Path: uri, Err: fmt.Errorf("%w: %v", fs.ErrNotExist, err)}
	}
	return &fs.PathError{Op: "open", Path: uri, Err: err}
}

// ReadAt reads len(p) bytes at off, from memory when they are there.
func (f *s3File) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: fs.ErrInvalid}
	}
	if off >= f.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), f.size-off))
	var err error
	switch {
	case f.whole != nil:
		copy(p[:n], f.whole[off:])
	case off >= f.tailOff:
		copy(p[:n], f.tail[off-f.tailOff:])
	default:
		err = f.chunks.readAt(p[:n], off)
	}
	if err != nil {
		return 0, &fs.PathError{Op: "read", Path: "s3://" + f.bucket + "/" + f.key, Err: err}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Read reads from the current position (Avro and JSON readers use it).
func (f *s3File) Read(p []byte) (int, error) {
	if f.pos >= f.size {
		return 0, io.EOF
	}
	n, err := f.ReadAt(p, f.pos)
	f.pos += int64(n)
	if errors.Is(err, io.EOF) && n > 0 {
		err = nil
	}
	return n, err
}

// Seek moves the position; arrow-go seeks to the end to learn the size.
func (f *s3File) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += f.pos
	case io.SeekEnd:
		offset += f.size
	default:
		return 0, fmt.Errorf("lake: seek: bad whence %d", whence)
	}
	if offset < 0 {
		return 0, fmt.Errorf("lake: seek to %d: before the start", offset)
	}
	f.pos = offset
	return offset, nil
}

// Close lets go of what the file holds in memory.
func (f *s3File) Close() error {
	f.whole, f.tail = nil, nil
	if f.chunks != nil {
		f.chunks.close()
	}
	return nil
}

func (f *s3File) Stat() (fs.FileInfo, error) { return s3FileInfo{name: f.name, size: f.size}, nil }

type s3FileInfo struct {
	name string
	size int64
}

func (i s3FileInfo) Name() string       { return i.name }
func (i s3FileInfo) Size() int64        { return i.size }
func (i s3FileInfo) Mode() fs.FileMode  { return fs.ModeIrregular }
func (i s3FileInfo) ModTime() time.Time { return time.Time{} }
func (i s3FileInfo) IsDir() bool        { return false }
func (i s3FileInfo) Sys() any           { return nil }
