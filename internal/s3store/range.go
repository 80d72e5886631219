package s3store

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// GetRange reads n bytes of the object at key from offset off: what a
// reader of a columnar file (a Parquet footer, one row group's pages)
// needs without downloading the whole object. A range is not checked
// against the object's CRC32C, which covers the whole object only; its
// length is checked.
func (s *Store) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	full, err := s.objectKey(opGet, key)
	if err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, nil
	}
	start := time.Now()
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(full),
		Range:  aws.String(fmt.Sprintf("bytes=%d-%d", off, off+n-1)),
	})
	if err != nil {
		return nil, s.wrap(opGet, s.path(full), err)
	}
	defer out.Body.Close()
	b := make([]byte, n)
	got, err := io.ReadFull(out.Body, b)
	if err != nil {
		return nil, s.wrap(opGet, s.path(full), fmt.Errorf("range %d+%d: read %d bytes: %w", off, n, got, err))
	}
	s.log.DebugContext(ctx, "s3store: get range", "key", full, "offset", off, "bytes", n, "duration", time.Since(start))
	return b, nil
}
