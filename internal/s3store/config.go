package s3store

import (
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/retrain-ml/retrain/internal/redact"
)

// Config says where a Store lives and how to reach it. Only URI is required.
type Config struct {
	// URI is the Store's root, s3://bucket or s3://bucket/prefix.
	URI string

	// Endpoint is the S3 API base URL, such as http://127.0.0.1:7070, for
	// S3-compatible servers. Empty means AWS, or AWS_ENDPOINT_URL_S3 /
	// AWS_ENDPOINT_URL when set.
	Endpoint string

	// Region defaults to AWS_REGION or the shared config's region, then to
	// us-east-1 (which S3-compatible servers generally accept).
	Region string

	// UsePathStyle addresses buckets as endpoint/bucket instead of
	// bucket.endpoint. Most S3-compatible servers need it.
	UsePathStyle bool

	// AccessKeyID, SecretAccessKey and SessionToken are static credentials.
	// When AccessKeyID is empty, the standard AWS credential chain is used
	// (AWS_ACCESS_KEY_ID and friends, shared config files, SSO, IMDS, ...).
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string

	// PartSize is the multipart upload part size; objects larger than
	// MultipartThreshold are uploaded in parts of this size. Defaults: 8 MiB
	// and 16 MiB.
	PartSize           int64
	MultipartThreshold int64

	// Concurrency is how many parts of one upload are sent at once.
	// Default 4.
	Concurrency int

	// OpenTimeout bounds Open's reachability check. Default 15s.
	OpenTimeout time.Duration

	// MaxAttempts bounds the attempts of one S3 request, the first one
	// included, and MaxBackoff the wait between two. Defaults: 10 and
	// 10s, which outlive an endpoint that is down for 30 s (retry.go).
	// Open's own reachability check keeps the SDK's 3 attempts.
	MaxAttempts int
	MaxBackoff  time.Duration

	// ResponseHeaderTimeout bounds the wait for the start of an answer
	// once a request has been sent in full; a request that gets none in
	// time is retried like a reset connection (reason "timeout"). It does
	// not bound sending an upload's body or receiving a download's.
	// Default 30s (awsconfig.go): far above any answer an S3 server
	// takes, far below a step's timeout.
	ResponseHeaderTimeout time.Duration

	// OnRetry, when set, is told of every request sent again after a
	// retryable failure (after the Store has logged it at Warn), for
	// example to count it in a metric. It must not block.
	OnRetry func(RetryEvent) `json:"-"`
	// OnRequest, when set, is told of every request sent (each attempt),
	// for example to count it in a metric. It must not block. Requests
	// are also added to the Usage of their context (WithUsage).
	OnRequest func(RequestEvent) `json:"-"`

	// Logger receives debug logs of each operation and a warning for
	// each retried request. Default slog.Default().
	Logger *slog.Logger
}

const (
	defaultPartSize    = 8 << 20
	defaultThreshold   = 16 << 20
	defaultConcurrency = 4
	defaultOpenTimeout = 15 * time.Second
	defaultRegion      = "us-east-1"
)

// String describes c without its secrets, so that %v and %+v are safe.
func (c Config) String() string {
	return fmt.Sprintf("s3store.Config{URI:%s Endpoint:%s Region:%s UsePathStyle:%t AccessKeyID:%s SecretAccessKey:%s SessionToken:%s}",
		c.URI, displayEndpoint(c.Endpoint), c.Region, c.UsePathStyle,
		mask(c.AccessKeyID), mask(c.SecretAccessKey), mask(c.SessionToken))
}

// GoString keeps %#v from printing the secrets field by field.
func (c Config) GoString() string { return c.String() }

// LogValue keeps slog from printing the secrets.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("uri", c.URI),
		slog.String("endpoint", displayEndpoint(c.Endpoint)),
		slog.String("region", c.Region),
		slog.Bool("path_style", c.UsePathStyle),
		slog.Bool("static_credentials", c.AccessKeyID != ""),
	)
}

func mask(s string) string {
	if s == "" {
		return `""`
	}
	return "[REDACTED]"
}

// displayEndpoint returns endpoint fit for messages: user information
// (http://user:password@host) is dropped, credential parameters masked.
func displayEndpoint(endpoint string) string {
	if endpoint == "" {
		return ""
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "(invalid endpoint URL)"
	}
	u.User = nil
	return redact.URI(u.String())
}
