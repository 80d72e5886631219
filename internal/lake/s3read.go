package lake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/retrain-ml/retrain/internal/s3store"
)

// ReadConfig tunes how table IO reads an S3 warehouse (s3fs.go). 0 takes
// the default of each field.
type ReadConfig struct {
	// Disabled reads through iceberg-go's own file IO: an unranged open,
	// a footer read, a metadata read and one GET per column chunk, and no
	// metadata cache. For comparisons (the lake benchmark's baseline).
	Disabled bool
	// TailBytes is the suffix the first request of a file fetches
	// (default 1 MiB). It tells the file's size (Content-Range) and holds
	// the Parquet footer and metadata of any file retrain writes (a few
	// KiB for 15 columns and one row group; ~100 KiB for 100 row groups
	// of 50 columns), and the whole of a file up to its size: every data
	// file of the demo layout up to millions of rows. 1 MiB takes ~10 ms
	// at S3's 80-100 MB/s per connection, half a round trip.
	TailBytes int64
	// WholeFileBytes: a file no larger is read whole and served from
	// memory (default 8 MiB): the rest of it in one more GET after the
	// tail. Reading it in pieces costs at least a GET per projected column
	// chunk; 8 MiB takes ~80-100 ms at S3's per-connection rate, about as
	// long as 4 round trips, and a file that size has more column chunks
	// than that in any table with the demo's width.
	WholeFileBytes int64
	// MergeGapBytes: two column chunks a scan needs are fetched in one GET
	// when the bytes between them are fewer than this (default 1 MiB: at
	// S3's rate about half a round trip, so reading the gap is cheaper
	// than another request).
	MergeGapBytes int64
	// MaxRangeBytes caps one coalesced GET (default 8 MiB), and so the
	// memory one read holds; larger spans are split and fetched at once.
	MaxRangeBytes int64
	// Concurrency is the data files a scan reads at once (iceberg-go's
	// WithMaxConcurrency; its default, GOMAXPROCS, is sized for the CPU
	// and leaves an S3 scan waiting on one round trip per core). Default
	// 16: at 20 ms per request 16 files in flight keep two cores decoding.
	// A scan holds up to this many files' decoded batches (iceberg-go's
	// bound), and each open file at most WholeFileBytes, or TailBytes plus
	// a few MaxRangeBytes ranges.
	Concurrency int
	// CacheBytes is the budget of the catalog's cache of immutable files
	// (metacache.go): manifest lists, manifests, table metadata and data
	// files up to WholeFileBytes (default 256 MiB; a manifest of 64 files
	// is ~10 KiB, a demo data file 15-500 KiB). -1: no cache.
	CacheBytes int64
	// StallTimeout: a download whose body sends nothing for this long is
	// cut off and fetched again (default 30 s); the SDK's timeouts stop
	// at the response headers (ResponseHeaderTimeout).
	StallTimeout time.Duration
	// StallAttempts bounds the fetches of one range whose body stalls
	// (default 4).
	StallAttempts int
}

func (c ReadConfig) withDefaults() ReadConfig {
	def := func(v *int64, d int64) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.TailBytes, 1<<20)
	def(&c.WholeFileBytes, 8<<20)
	def(&c.MergeGapBytes, 1<<20)
	def(&c.MaxRangeBytes, 8<<20)
	if c.CacheBytes == 0 {
		c.CacheBytes = 256 << 20
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 16
	}
	if c.StallTimeout <= 0 {
		c.StallTimeout = 30 * time.Second
	}
	if c.StallAttempts <= 0 {
		c.StallAttempts = 4
	}
	c.WholeFileBytes = max(c.WholeFileBytes, c.TailBytes)
	return c
}

// s3Reads is what every table IO of one catalog reads with: one S3 client
// on the catalog's aws.Config (retry policy, counting), the settings, and
// the metadata cache. Owned by the catalog, so by the worker process.
type s3Reads struct {
	client *s3.Client
	cfg    ReadConfig
	cache  *metaCache
	log    *slog.Logger
}

func newS3Reads(awsCfg *aws.Config, endpoint string, props map[string]string, cfg ReadConfig, log *slog.Logger) *s3Reads {
	cfg = cfg.withDefaults()
	// Path-style addressing whenever an endpoint is set, as iceberg-go's
	// S3 IO does, unless the catalog asks for virtual hosts.
	pathStyle := endpoint != "" && props["s3.force-virtual-addressing"] != "true"
	client := s3.NewFromConfig(*awsCfg, func(o *s3.Options) { o.UsePathStyle = pathStyle })
	var cache *metaCache
	if cfg.CacheBytes > 0 {
		cache = newMetaCache(cfg.CacheBytes)
	}
	return &s3Reads{client: client, cfg: cfg, cache: cache, log: log}
}

// errStalled ends a download whose body stopped arriving.
var errStalled = errors.New("S3 response body stalled")

// getRange fetches rng ("bytes=a-b", "bytes=-n", or "" for all) of
// bucket/key and returns the bytes and the object's size. A body that
// stalls for StallTimeout is abandoned and the range fetched again: the
// SDK retries a request until its headers arrive, not a body that stops
// midway, which would otherwise hang the scan until the step's timeout.
func (r *s3Reads) getRange(ctx context.Context, bucket, key, rng string) ([]byte, int64, error) {
	var lastErr error
	for attempt := 1; attempt <= r.cfg.StallAttempts; attempt++ {
		data, size, err := r.getOnce(ctx, bucket, key, rng)
		if err == nil || !errors.Is(err, errStalled) || ctx.Err() != nil {
			return data, size, err
		}
		lastErr = err
		r.log.WarnContext(ctx, "lake: S3 download stalled, fetching it again",
			"bucket", bucket, "key", key, "range", rng, "attempt", attempt+1, "stall_timeout", r.cfg.StallTimeout)
	}
	return nil, 0, fmt.Errorf("lake: get s3://%s/%s (%s): %d attempts: %w", bucket, key, rng, r.cfg.StallAttempts, lastErr)
}

func (r *s3Reads) getOnce(ctx context.Context, bucket, key, rng string) ([]byte, int64, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	in := &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}
	if rng != "" {
		in.Range = aws.String(rng)
	}
	watchdog := time.AfterFunc(r.cfg.StallTimeout, func() { cancel(errStalled) })
	defer watchdog.Stop()
	out, err := r.client.GetObject(ctx, in)
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, errStalled) {
			err = cause
		}
		return nil, 0, err
	}
	defer out.Body.Close()
	size := aws.ToInt64(out.ContentLength)
	if out.ContentRange != nil {
		if total, ok := rangeTotal(*out.ContentRange); ok {
			size = total
		}
	}
	started := time.Now()
	buf := make([]byte, 0, max(aws.ToInt64(out.ContentLength), 0))
	body := progressReader{r: out.Body, progress: func() { watchdog.Reset(r.cfg.StallTimeout) }}
	buf, err = readAllInto(buf, body)
	s3store.UsageFrom(ctx).AddWait(time.Since(started))
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, errStalled) {
			err = cause
		}
		return nil, 0, fmt.Errorf("read body: %w", err)
	}
	return buf, size, nil
}

// rangeTotal is the object size of a Content-Range "bytes a-b/total".
func rangeTotal(cr string) (int64, bool) {
	i := strings.LastIndexByte(cr, '/')
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(cr[i+1:], 10, 64)
	return n, err == nil
}

// invalidRange reports a 416: a suffix range of an empty object.
func invalidRange(err error) bool {
	re, ok := errors.AsType[*smithyhttp.ResponseError](err)
	return ok && re.HTTPStatusCode() == 416
}

// progressReader calls progress whenever a read returns bytes.
type progressReader struct {
	r        io.Reader
	progress func()
}

func (p progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.progress()
	}
	return n, err
}

// readAllInto appends all of r to buf.
func readAllInto(buf []byte, r io.Reader) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}
