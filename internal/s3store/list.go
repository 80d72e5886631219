package s3store

import (
	"context"
	"errors"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// List yields every object whose key starts with prefix, in key order,
// fetching pages of up to 1000 keys as the iteration proceeds. prefix is
// relative to the Store's prefix; "" lists everything under it. An error
// ends the iteration.
func (s *Store) List(ctx context.Context, prefix string) iter.Seq2[ObjectInfo, error] {
	return func(yield func(ObjectInfo, error) bool) {
		full, err := s.listPrefix(opList, prefix)
		if err != nil {
			yield(ObjectInfo{}, err)
			return
		}
		p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{
			Bucket: aws.String(s.bucket),
			Prefix: aws.String(full),
		})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				yield(ObjectInfo{}, s.wrap(opList, s.path(full), err))
				return
			}
			for _, o := range page.Contents {
				info := ObjectInfo{
					Key:          s.relKey(aws.ToString(o.Key)),
					Size:         aws.ToInt64(o.Size),
					ETag:         aws.ToString(o.ETag),
					LastModified: aws.ToTime(o.LastModified),
				}
				if !yield(info, nil) {
					return
				}
			}
		}
	}
}

// ListPrefixes returns the names one level below prefix, like the entries of
// a directory: for objects a/b/c and a/d, ListPrefixes(ctx, "a/") returns
// ["b"]; objects directly below prefix are not included. prefix must be ""
// or end in "/".
func (s *Store) ListPrefixes(ctx context.Context, prefix string) ([]string, error) {
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		return nil, s.invalid(opList, invalidKey(prefix, `prefix must end in "/"`))
	}
	full, err := s.listPrefix(opList, prefix)
	if err != nil {
		return nil, err
	}
	var names []string
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{
		Bucket:    aws.String(s.bucket),
		Prefix:    aws.String(full),
		Delimiter: aws.String("/"),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, s.wrap(opList, s.path(full), err)
		}
		for _, cp := range page.CommonPrefixes {
			name := strings.TrimSuffix(strings.TrimPrefix(aws.ToString(cp.Prefix), full), "/")
			if name != "" {
				names = append(names, name)
			}
		}
	}
	return names, nil
}

// DeleteByPrefix deletes every object below prefix and returns how many it
// deleted. To keep a typo from wiping out a sibling ("run1" matching
// "run10/") or the whole Store, prefix must be non-empty and end in "/".
func (s *Store) DeleteByPrefix(ctx context.Context, prefix string) (int, error) {
	if prefix == "" || !strings.HasSuffix(prefix, "/") {
		return 0, s.invalid(opDeletePrefix, invalidKey(prefix, `prefix must be non-empty and end in "/"`))
	}
	if _, err := s.listPrefix(opDeletePrefix, prefix); err != nil {
		return 0, err
	}
	deleted := 0
	var batch []string
	// Deleting while listing is safe: ListObjectsV2 continues after the
	// last key it returned, whether or not that key still exists.
	for o, err := range s.List(ctx, prefix) {
		if err != nil {
			return deleted, err
		}
		batch = append(batch, o.Key)
		if len(batch) == maxDeleteBatch {
			n, err := s.DeleteKeys(ctx, batch)
			deleted += n
			if err != nil {
				return deleted, err
			}
			batch = batch[:0]
		}
	}
	n, err := s.DeleteKeys(ctx, batch)
	deleted += n
	return deleted, err
}

// maxDeleteBatch is S3's limit on keys per DeleteObjects request.
const maxDeleteBatch = 1000

// DeleteKeys deletes the objects at keys, in batches, and returns how many
// it deleted. Missing objects count as deleted. All keys are validated
// before anything is deleted.
func (s *Store) DeleteKeys(ctx context.Context, keys []string) (int, error) {
	ids := make([]types.ObjectIdentifier, 0, len(keys))
	for _, k := range keys {
		full, err := s.objectKey(opDelete, k)
		if err != nil {
			return 0, err
		}
		ids = append(ids, types.ObjectIdentifier{Key: aws.String(full)})
	}
	deleted := 0
	for batch := range slices.Chunk(ids, maxDeleteBatch) {
		out, err := s.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{
			Bucket: aws.String(s.bucket),
			Delete: &types.Delete{Objects: batch, Quiet: aws.Bool(true)},
		})
		if err != nil {
			return deleted, s.wrap(opDelete, s.path(aws.ToString(batch[0].Key)), err)
		}
		if len(out.Errors) > 0 {
			e := out.Errors[0]
			return deleted + len(batch) - len(out.Errors), newError(opDelete, s.path(aws.ToString(e.Key)), nil,
				s.redact.String(aws.ToString(e.Code)+": "+aws.ToString(e.Message)))
		}
		deleted += len(batch)
		s.log.DebugContext(ctx, "s3store: deleted", "objects", len(batch), "first", aws.ToString(batch[0].Key))
	}
	return deleted, nil
}

// AbortUploads aborts the unfinished multipart uploads below prefix that
// were started more than olderThan ago, and returns how many it aborted.
// Their parts are invisible but take space; a process that dies mid-upload
// leaves them behind. Recent uploads are spared: they may still be running.
func (s *Store) AbortUploads(ctx context.Context, prefix string, olderThan time.Duration) (int, error) {
	full, err := s.listPrefix(opAbortUploads, prefix)
	if err != nil {
		return 0, err
	}
	cutoff := time.Now().Add(-olderThan)
	aborted := 0
	in := &s3.ListMultipartUploadsInput{Bucket: aws.String(s.bucket), Prefix: aws.String(full)}
	for {
		page, err := s.client.ListMultipartUploads(ctx, in)
		if err != nil {
			return aborted, s.wrap(opAbortUploads, s.path(full), err)
		}
		for _, u := range page.Uploads {
			if !aws.ToTime(u.Initiated).Before(cutoff) {
				continue
			}
			_, err := s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
				Bucket: aws.String(s.bucket), Key: u.Key, UploadId: u.UploadId,
			})
			if err != nil && !errors.Is(s.wrap(opAbortUploads, "", err), ErrNotFound) {
				return aborted, s.wrap(opAbortUploads, s.path(aws.ToString(u.Key)), err)
			}
			aborted++
		}
		if !aws.ToBool(page.IsTruncated) {
			break
		}
		in.KeyMarker, in.UploadIdMarker = page.NextKeyMarker, page.NextUploadIdMarker
	}
	if aborted > 0 {
		s.log.InfoContext(ctx, "s3store: aborted stale multipart uploads", "prefix", full, "uploads", aborted)
	}
	return aborted, nil
}
