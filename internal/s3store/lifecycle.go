package s3store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// SetExpiration installs a bucket lifecycle rule that expires objects below
// prefix days after they were written, replacing an earlier rule for the
// same prefix and keeping the bucket's other rules. Servers without
// lifecycle support (versitygw among them) fail with [ErrNotImplemented];
// callers that also sweep expired data themselves can ignore that.
//
// The rule is stored in the bucket's lifecycle configuration, which is read,
// changed and written back: two concurrent SetExpiration calls for
// different prefixes of one bucket can lose one of the rules.
func (s *Store) SetExpiration(ctx context.Context, prefix string, days int) error {
	if days < 1 {
		return newError(opSetExpiration, s.URI().String(), nil, fmt.Sprintf("days must be at least 1, got %d", days))
	}
	full, err := s.listPrefix(opSetExpiration, prefix)
	if err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(full))
	id := "retrain-expire-" + hex.EncodeToString(sum[:8])

	var rules []types.LifecycleRule
	cur, err := s.client.GetBucketLifecycleConfiguration(ctx, &s3.GetBucketLifecycleConfigurationInput{Bucket: aws.String(s.bucket)})
	if err != nil {
		e := s.wrap(opSetExpiration, s.path(full), err).(*Error)
		// No configuration yet is the normal first case.
		if e.Code != "NoSuchLifecycleConfiguration" && !errors.Is(e, ErrNotFound) {
			return e
		}
	} else {
		for _, r := range cur.Rules {
			if aws.ToString(r.ID) != id {
				rules = append(rules, r)
			}
		}
	}
	rules = append(rules, types.LifecycleRule{
		ID:         aws.String(id),
		Status:     types.ExpirationStatusEnabled,
		Filter:     &types.LifecycleRuleFilter{Prefix: aws.String(full)},
		Expiration: &types.LifecycleExpiration{Days: aws.Int32(int32(days))},
		// Parts of uploads that crashed midway are invisible and billed.
		AbortIncompleteMultipartUpload: &types.AbortIncompleteMultipartUpload{DaysAfterInitiation: aws.Int32(1)},
	})
	_, err = s.client.PutBucketLifecycleConfiguration(ctx, &s3.PutBucketLifecycleConfigurationInput{
		Bucket:                 aws.String(s.bucket),
		LifecycleConfiguration: &types.BucketLifecycleConfiguration{Rules: rules},
	})
	if err != nil {
		return s.wrap(opSetExpiration, s.path(full), err)
	}
	s.log.InfoContext(ctx, "s3store: lifecycle expiration set", "prefix", full, "days", days)
	return nil
}
