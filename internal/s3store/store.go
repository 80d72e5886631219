package s3store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	tmtypes "github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Store reads and writes objects below one s3://bucket/prefix. It is safe for
// concurrent use.
type Store struct {
	client   *s3.Client
	tm       *transfermanager.Client
	bucket   string
	prefix   string // without leading or trailing "/"; may be empty
	endpoint string // for messages, without user information
	log      *slog.Logger
	redact   redactor
	retry    *retryCounter // counts and logs the client's retries
}

// Open connects to the bucket named by cfg.URI and checks that it is
// reachable with the configured credentials, so that a wrong endpoint or bad
// credentials fail here, with a clear message, before anything is written.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	root, err := ParseURI(cfg.URI)
	if err != nil {
		return nil, err
	}
	if err := checkConfig(cfg); err != nil {
		return nil, err
	}
	s := &Store{
		bucket: root.Bucket,
		prefix: strings.TrimSuffix(root.Key, "/"),
		log:    cmp.Or(cfg.Logger, slog.Default()),
	}
	s.retry = &retryCounter{log: s.log, onRetry: cfg.OnRetry}

	timeout := cmp.Or(cfg.OpenTimeout, defaultOpenTimeout)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	awsCfg, err := loadAWSConfig(ctx, cfg, s.retry)
	if err != nil {
		return nil, err
	}
	s.redact = s.retry.redact

	s.client = s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		o.UsePathStyle = cfg.UsePathStyle
		// Objects written by other tools may have no checksum; that is not
		// worth a warning on every read.
		o.DisableLogOutputChecksumValidationSkipped = true
	})
	s.endpoint = displayEndpoint(aws.ToString(s.client.Options().BaseEndpoint))
	if s.endpoint == "" {
		s.endpoint = "AWS S3 region " + awsCfg.Region
	}
	s.tm = transfermanager.New(s.client, func(o *transfermanager.Options) {
		o.PartSizeBytes = cmp.Or(cfg.PartSize, defaultPartSize)
		o.MultipartUploadThreshold = cmp.Or(cfg.MultipartThreshold, defaultThreshold)
		o.Concurrency = cmp.Or(cfg.Concurrency, defaultConcurrency)
		o.ChecksumAlgorithm = tmtypes.ChecksumAlgorithmCrc32c
	})

	if err := s.checkBucket(ctx); err != nil {
		return nil, err
	}
	s.log.DebugContext(ctx, "s3store: opened", "uri", s.URI().String(), "endpoint", s.endpoint)
	return s, nil
}

// checkBucket sends HeadBucket and turns its failure into advice.
func (s *Store) checkBucket(ctx context.Context) error {
	_, err := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(s.bucket)}, openAttempts)
	if err == nil {
		return nil
	}
	e := s.wrap(opOpen, "", err).(*Error)
	if errors.Is(e, ErrNotFound) {
		// A HEAD response has no body to say what was not found: some
		// servers (versitygw) answer an unknown access key with 404 too.
		// A GET-style request of the same bucket brings the error code.
		_, err := s.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(s.bucket), MaxKeys: aws.Int32(1)}, openAttempts)
		if err == nil {
			return nil
		}
		e = s.wrap(opOpen, "", err).(*Error)
	}
	switch {
	case errors.Is(e, ErrNotFound), errors.Is(e, ErrNoSuchBucket):
		e.kind = ErrNoSuchBucket
		e.Msg = fmt.Sprintf("bucket %q does not exist at %s", s.bucket, s.endpoint)
	case e.StatusCode == 301:
		e.Msg = fmt.Sprintf("cannot reach bucket %q at %s: the bucket is in another region; set Region", s.bucket, s.endpoint)
	default:
		e.Msg = fmt.Sprintf("cannot reach bucket %q at %s: %s", s.bucket, s.endpoint, e.Msg)
	}
	return e
}

// URI returns the Store's root, s3://bucket/prefix.
func (s *Store) URI() URI {
	return URI{Bucket: s.bucket, Key: s.prefix}
}

// Operation names, as they appear in errors and logs.
const (
	opOpen          = "open"
	opPut           = "put"
	opPutIfAbsent   = "put-if-absent"
	opPutIfMatch    = "put-if-match"
	opGet           = "get"
	opHead          = "head"
	opDelete        = "delete"
	opList          = "list"
	opDeletePrefix  = "delete-prefix"
	opSetExpiration = "set-expiration"
	opAbortUploads  = "abort-uploads"
)

// objectKey validates key and returns the full key it names in the bucket.
func (s *Store) objectKey(op, key string) (string, error) {
	if err := ValidateKey(key); err != nil {
		return "", s.invalid(op, err)
	}
	full := join(s.prefix, key)
	if len(full) > maxKeyLen {
		return "", s.invalid(op, invalidKey(key, fmt.Sprintf("with the prefix it is longer than %d bytes", maxKeyLen)))
	}
	return full, nil
}

// listPrefix validates prefix and returns the full prefix it names.
func (s *Store) listPrefix(op, prefix string) (string, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return "", s.invalid(op, err)
	}
	return join(s.prefix, prefix), nil
}

func (s *Store) invalid(op string, err error) error {
	return newError(op, s.URI().String(), ErrInvalidKey, strings.TrimPrefix(err.Error(), "s3store: "))
}

// path returns the s3:// URI of a full key, for messages.
func (s *Store) path(full string) string {
	return URI{Bucket: s.bucket, Key: full}.String()
}

// relKey turns a full key from a listing back into a key relative to the
// Store's prefix.
func (s *Store) relKey(full string) string {
	if s.prefix == "" {
		return full
	}
	return strings.TrimPrefix(full, s.prefix+"/")
}

// Logger returns the logger the Store was configured with, so that packages
// built on a Store log to the same place.
func (s *Store) Logger() *slog.Logger { return s.log }
