package s3store

import (
	"context"
	"iter"
	"strings"

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
	full, err := s.listPrefix(opDeletePrefix, prefix)
	if err != nil {
		return 0, err
	}
	deleted := 0
	var batch []types.ObjectIdentifier
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		out, err := s.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{
			Bucket: aws.String(s.bucket),
			Delete: &types.Delete{Objects: batch, Quiet: aws.Bool(true)},
		})
		if err != nil {
			return s.wrap(opDeletePrefix, s.path(full), err)
		}
		if len(out.Errors) > 0 {
			e := out.Errors[0]
			return newError(opDeletePrefix, s.path(aws.ToString(e.Key)), nil,
				s.redact.String(aws.ToString(e.Code)+": "+aws.ToString(e.Message)))
		}
		deleted += len(batch)
		batch = batch[:0]
		return nil
	}
	// Deleting while listing is safe: ListObjectsV2 continues after the
	// last key it returned, whether or not that key still exists.
	for o, err := range s.List(ctx, prefix) {
		if err != nil {
			return deleted, err
		}
		batch = append(batch, types.ObjectIdentifier{Key: aws.String(join(s.prefix, o.Key))})
		if len(batch) == 1000 {
			if err := flush(); err != nil {
				return deleted, err
			}
		}
	}
	if err := flush(); err != nil {
		return deleted, err
	}
	s.log.DebugContext(ctx, "s3store: deleted prefix", "prefix", full, "objects", deleted)
	return deleted, nil
}
