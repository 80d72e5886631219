package s3store

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"mime"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	tmtypes "github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Key          string // relative to the Store's prefix
	Size         int64
	ETag         string // as the server sent it, quotes included; pass it to PutIfMatch
	LastModified time.Time
	// CRC32C is the base64 full-object CRC32C the server recorded, when it
	// recorded one (objects written by a Store always have it). Listings do
	// not report it.
	CRC32C string
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32C returns the base64 CRC32C of b, in the form ObjectInfo.CRC32C uses.
func CRC32C(b []byte) string {
	return encodeCRC(crc32.Checksum(b, castagnoli))
}

func encodeCRC(sum uint32) string {
	return base64.StdEncoding.EncodeToString([]byte{byte(sum >> 24), byte(sum >> 16), byte(sum >> 8), byte(sum)})
}

// Put streams body to key, replacing any object there. Bodies larger than
// the multipart threshold are uploaded in parts, concurrently; memory use is
// bounded by part size times concurrency, whatever the body's length.
//
// The upload carries a full-object CRC32C that the server checks, and Put
// compares the checksum the server recorded with the one computed over the
// bytes read from body.
func (s *Store) Put(ctx context.Context, key string, body io.Reader) (ObjectInfo, error) {
	return s.put(ctx, opPut, key, body, nil, nil)
}

// PutIfAbsent is Put that succeeds only if key does not exist yet
// (If-None-Match: *). When it does, the error wraps [ErrExists] and the
// existing object is left untouched. Of several concurrent PutIfAbsent
// calls for one key exactly one succeeds.
func (s *Store) PutIfAbsent(ctx context.Context, key string, body io.Reader) (ObjectInfo, error) {
	return s.put(ctx, opPutIfAbsent, key, body, nil, aws.String("*"))
}

// PutIfMatch is Put that succeeds only if the object at key still has the
// given ETag (If-Match), a compare-and-swap. When it does not, the error
// wraps [ErrETagMismatch]; when the object is gone, [ErrNotFound].
func (s *Store) PutIfMatch(ctx context.Context, key, etag string, body io.Reader) (ObjectInfo, error) {
	if etag == "" {
		return ObjectInfo{}, newError(opPutIfMatch, s.URI().String(), nil, "empty ETag")
	}
	return s.put(ctx, opPutIfMatch, key, body, aws.String(etag), nil)
}

func (s *Store) put(ctx context.Context, op, key string, body io.Reader, ifMatch, ifNoneMatch *string) (ObjectInfo, error) {
	full, err := s.objectKey(op, key)
	if err != nil {
		return ObjectInfo{}, err
	}
	start := time.Now()
	h := &countingHash{Hash32: crc32.New(castagnoli)}
	in := &transfermanager.UploadObjectInput{
		Bucket:            aws.String(s.bucket),
		Key:               aws.String(full),
		Body:              io.TeeReader(body, h),
		ChecksumAlgorithm: tmtypes.ChecksumAlgorithmCrc32c,
		// A full-object CRC32C, unlike the default composite checksum of a
		// multipart upload, can be verified by reading the object back.
		ChecksumType: tmtypes.ChecksumTypeFullObject,
		IfMatch:      ifMatch,
		IfNoneMatch:  ifNoneMatch,
	}
	if ct := mime.TypeByExtension(path.Ext(key)); ct != "" {
		in.ContentType = aws.String(ct)
	}
	out, err := s.tm.UploadObject(ctx, in)
	if err != nil && errors.Is(err, context.Canceled) && ctx.Err() == nil {
		// The caller did not cancel: the transfer manager cancelled the
		// other parts of a multipart upload after one failed, and the
		// error it returned is a cancelled part's, not the failure's.
		err = fmt.Errorf("a part of the multipart upload failed and the others were cancelled: %w", err)
	}
	if err != nil {
		s.log.DebugContext(ctx, "s3store: put failed", "op", op, "key", full, "error", s.redact.String(err.Error()))
		return ObjectInfo{}, s.wrap(op, s.path(full), err)
	}
	info := ObjectInfo{
		Key:    key,
		Size:   h.n,
		ETag:   aws.ToString(out.ETag),
		CRC32C: encodeCRC(h.Sum32()),
	}
	if got := aws.ToString(out.ChecksumCRC32C); got != "" && got != info.CRC32C {
		return ObjectInfo{}, newError(op, s.path(full), ErrChecksumMismatch,
			"server recorded CRC32C "+got+", sent "+info.CRC32C)
	}
	s.log.DebugContext(ctx, "s3store: put", "op", op, "key", full, "bytes", info.Size, "duration", time.Since(start))
	return info, nil
}

// PutBytes is Put for a small in-memory body.
func (s *Store) PutBytes(ctx context.Context, key string, b []byte) (ObjectInfo, error) {
	return s.Put(ctx, key, bytes.NewReader(b))
}

// countingHash is the running checksum of an upload.
type countingHash struct {
	hash.Hash32
	n int64
}

func (c *countingHash) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.Hash32.Write(p)
}

// Get opens the object at key for streaming. The returned reader verifies
// the object's full-object CRC32C, when the server has one, and its length:
// a mismatch surfaces as a Read error wrapping [ErrChecksumMismatch] at the
// end of the stream, so the last bytes of a corrupt object are never
// followed by io.EOF. The caller must Close the reader.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, ObjectInfo, error) {
	full, err := s.objectKey(opGet, key)
	if err != nil {
		return nil, ObjectInfo{}, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket:       aws.String(s.bucket),
		Key:          aws.String(full),
		ChecksumMode: types.ChecksumModeEnabled,
	})
	if err != nil {
		return nil, ObjectInfo{}, s.wrap(opGet, s.path(full), err)
	}
	info := ObjectInfo{
		Key:          key,
		Size:         aws.ToInt64(out.ContentLength),
		ETag:         aws.ToString(out.ETag),
		LastModified: aws.ToTime(out.LastModified),
		CRC32C:       fullObjectCRC(out.ChecksumCRC32C, out.ChecksumType),
	}
	r := &verifyingReader{body: out.Body, size: -1, want: info.CRC32C, store: s, path: s.path(full)}
	if out.ContentLength != nil {
		r.size = info.Size
	}
	if r.want != "" {
		r.hash = crc32.New(castagnoli)
	}
	return r, info, nil
}

// GetBytes reads the whole object at key, verified as by Get.
func (s *Store) GetBytes(ctx context.Context, key string) ([]byte, ObjectInfo, error) {
	r, info, err := s.Get(ctx, key)
	if err != nil {
		return nil, ObjectInfo{}, err
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, ObjectInfo{}, err
	}
	return b, info, nil
}

// Head returns the object's metadata without its body.
func (s *Store) Head(ctx context.Context, key string) (ObjectInfo, error) {
	full, err := s.objectKey(opHead, key)
	if err != nil {
		return ObjectInfo{}, err
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{
		Bucket:       aws.String(s.bucket),
		Key:          aws.String(full),
		ChecksumMode: types.ChecksumModeEnabled,
	})
	if err != nil {
		return ObjectInfo{}, s.wrap(opHead, s.path(full), err)
	}
	return ObjectInfo{
		Key:          key,
		Size:         aws.ToInt64(out.ContentLength),
		ETag:         aws.ToString(out.ETag),
		LastModified: aws.ToTime(out.LastModified),
		CRC32C:       fullObjectCRC(out.ChecksumCRC32C, out.ChecksumType),
	}, nil
}

// Delete removes the object at key. Deleting a missing object succeeds.
func (s *Store) Delete(ctx context.Context, key string) error {
	full, err := s.objectKey(opDelete, key)
	if err != nil {
		return err
	}
	_, err = s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(full)})
	if err != nil {
		return s.wrap(opDelete, s.path(full), err)
	}
	s.log.DebugContext(ctx, "s3store: delete", "key", full)
	return nil
}

// fullObjectCRC returns the CRC32C header value if it covers the whole
// object. A composite checksum ("<base64>-<parts>") is a checksum of part
// checksums and cannot be checked against the bytes of a plain GET.
func fullObjectCRC(v *string, typ types.ChecksumType) string {
	s := aws.ToString(v)
	if typ == types.ChecksumTypeComposite || strings.Contains(s, "-") {
		return ""
	}
	return s
}

// verifyingReader checks length and CRC32C of a downloaded object as it is
// read, and reports any failure through the Store's error type.
type verifyingReader struct {
	body  io.ReadCloser
	hash  hash.Hash32 // nil when there is nothing to compare against
	n     int64
	size  int64 // -1 when the response did not say
	want  string
	store *Store
	path  string
	err   error // sticky
}

func (r *verifyingReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	n, err := r.body.Read(p)
	r.n += int64(n)
	if r.hash != nil {
		r.hash.Write(p[:n])
	}
	if err == nil {
		return n, nil
	}
	// The stream ended, cleanly or not. Our own verdict comes first: the
	// SDK validates the checksum too, but its error is untyped.
	complete := err == io.EOF || r.n == r.size
	switch {
	case r.size >= 0 && r.n != r.size && (err == io.EOF || r.n > r.size):
		r.err = newError(opGet, r.path, ErrChecksumMismatch, "object is "+strconv.FormatInt(r.size, 10)+" bytes, read "+strconv.FormatInt(r.n, 10))
	case r.hash != nil && complete && encodeCRC(r.hash.Sum32()) != r.want:
		r.err = newError(opGet, r.path, ErrChecksumMismatch,
			"CRC32C of the bytes read is "+encodeCRC(r.hash.Sum32())+", server recorded "+r.want)
	case err == io.EOF:
		r.err = io.EOF
	default:
		r.err = r.store.wrap(opGet, r.path, err)
	}
	return n, r.err
}

func (r *verifyingReader) Close() error { return r.body.Close() }
