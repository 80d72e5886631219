package lake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/utils"
	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"

	"github.com/retrain-ml/retrain/internal/s3store"
)

// Why the catalog is wrapped: iceberg-go v0.7.0 builds a new S3 client
// for every table operation (table.FS(ctx), scans, commits), from the
// catalog properties alone, with the SDK's default retryer: 3 attempts
// and a client-side retry quota, no retry counting, no response timeout.
// Its one hook is an aws.Config carried by the operation's context
// (utils.WithAwsConfig), which it then uses as the base of that client.
// Table operations take their callers' contexts, all over the features
// code, so rather than asking every caller to decorate its context, the
// catalog hands out tables whose file IO decorates whatever context it
// is given, and decorates its own calls that read or write metadata.

// s3Catalog is an iceberg-go catalog whose tables' file IO uses one
// aws.Config: the object store's retry policy and retry counting
// (s3store.AWSConfig) and one HTTP client, so connections are reused
// across operations instead of dialled anew by each operation's client.
type s3Catalog struct {
	catalog.Catalog
	aws *aws.Config
	// reads serves its tables' reads (s3fs.go); nil when ReadConfig
	// disables it, leaving them to iceberg-go's IO.
	reads *s3Reads
}

// withAWS is ctx carrying the catalog's aws.Config for iceberg-go's S3 IO.
func (c *s3Catalog) withAWS(ctx context.Context) context.Context {
	return utils.WithAwsConfig(ctx, c.aws)
}

// table re-creates t with file IO that decorates every context it gets
// and with c as its catalog, so that the tables its commits and refreshes
// return are wrapped too (iceberg-go builds them from the table's IO
// function and catalog).
func (c *s3Catalog) table(t *table.Table) *table.Table {
	fs := t.FS
	fsF := func(ctx context.Context) (icebergio.IO, error) {
		inner, err := fs(c.withAWS(ctx))
		if err != nil || c.reads == nil {
			return inner, err
		}
		return &s3FS{inner: inner, ctx: ctx, r: c.reads}, nil
	}
	return table.New(t.Identifier(), t.Metadata(), t.MetadataLocation(), fsF, c,
		table.WithMetricsReporter(t.MetricsReporter()))
}

func (c *s3Catalog) LoadTable(ctx context.Context, id table.Identifier) (*table.Table, error) {
	t, err := c.Catalog.LoadTable(c.withAWS(ctx), id)
	if err != nil {
		return nil, err
	}
	return c.table(t), nil
}

func (c *s3Catalog) CreateTable(ctx context.Context, id table.Identifier, schema *iceberg.Schema, opts ...catalog.CreateTableOpt) (*table.Table, error) {
	t, err := c.Catalog.CreateTable(c.withAWS(ctx), id, schema, opts...)
	if err != nil {
		return nil, err
	}
	return c.table(t), nil
}

func (c *s3Catalog) RenameTable(ctx context.Context, from, to table.Identifier) (*table.Table, error) {
	t, err := c.Catalog.RenameTable(c.withAWS(ctx), from, to)
	if err != nil {
		return nil, err
	}
	return c.table(t), nil
}

// CommitTable writes the new metadata file through the catalog's IO.
func (c *s3Catalog) CommitTable(ctx context.Context, id table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	return c.Catalog.CommitTable(c.withAWS(ctx), id, reqs, updates)
}

func (c *s3Catalog) DropTable(ctx context.Context, id table.Identifier) error {
	return c.Catalog.DropTable(c.withAWS(ctx), id)
}

// Close closes the wrapped catalog (Catalog.Close looks for the method).
func (c *s3Catalog) Close() error {
	if cl, ok := c.Catalog.(interface{ Close() error }); ok {
		return cl.Close()
	}
	return nil
}

// onS3 reports whether table IO of the resolved config goes to S3 through
// retrain's read layer: a warehouse with an S3 scheme, in a catalog that
// does not configure its tables' IO itself. A rest catalog may vend each
// table's credentials and endpoint, so its tables get retrain's S3 client
// policy (retries, timeouts, counting: Open passes the aws.Config to every
// catalog type) with the vended settings laid over it by iceberg-go
// (io/gocloud/s3 resolveS3AWSConfig), but not the read layer.
func (c Config) onS3() bool {
	if c.Type == TypeREST {
		return false
	}
	u, err := url.Parse(c.Warehouse)
	if err != nil {
		return false
	}
	switch u.Scheme {
	case "s3", "s3a", "s3n":
		return true
	}
	return false
}

// Idle connections kept per host: iceberg-go's own setting for its S3
// clients (the SDK keeps 10), which the lake's parallel file writes need
// to reuse their connections rather than open new ones.
const s3IdleConnsPerHost = 256

// awsConfig is the aws.Config of the warehouse's table IO: the object
// store's (s3store.AWSConfig), with the S3 settings of c.
func (c Config) awsConfig(ctx context.Context, log *slog.Logger) (*aws.Config, error) {
	cfg, err := s3store.AWSConfig(ctx, s3store.Config{
		Endpoint:              c.S3.Endpoint,
		Region:                c.S3.Region,
		AccessKeyID:           c.S3.AccessKeyID,
		SecretAccessKey:       c.S3.SecretAccessKey,
		SessionToken:          c.S3.SessionToken,
		MaxAttempts:           c.S3.MaxAttempts,
		MaxBackoff:            c.S3.MaxBackoff,
		ResponseHeaderTimeout: c.S3.ResponseHeaderTimeout,
		OnRetry:               c.S3.OnRetry,
		OnRequest:             c.S3.OnRequest,
		Logger:                log,
	})
	if err != nil {
		return nil, fmt.Errorf("lake: S3 configuration of warehouse %s: %w", c.Warehouse, err)
	}
	bc, ok := cfg.HTTPClient.(*awshttp.BuildableClient)
	if !ok {
		return nil, fmt.Errorf("lake: S3 configuration of warehouse %s: unexpected HTTP client %T", c.Warehouse, cfg.HTTPClient)
	}
	bc = bc.WithTransportOptions(func(t *http.Transport) {
		t.MaxIdleConns = max(t.MaxIdleConns, s3IdleConnsPerHost)
		t.MaxIdleConnsPerHost = s3IdleConnsPerHost
	})
	// iceberg-go reads these properties only when it builds the AWS
	// configuration itself, which it no longer does; applied here, so
	// that they still hold.
	if v := c.Props[icebergio.S3ProxyURI]; v != "" {
		u, err := url.Parse(v)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("lake: catalog property %s=%q: not a proxy URL", icebergio.S3ProxyURI, v)
		}
		bc = bc.WithTransportOptions(func(t *http.Transport) { t.Proxy = http.ProxyURL(u) })
	}
	if v := c.Props[icebergio.S3ConnectTimeout]; v != "" {
		d, err := connectTimeout(v)
		if err != nil {
			return nil, fmt.Errorf("lake: catalog property %s=%q: %w", icebergio.S3ConnectTimeout, v, err)
		}
		bc = bc.WithDialerOptions(func(dl *net.Dialer) { dl.Timeout = d })
	}
	if v := c.Props[icebergio.S3RemoteSigningEnabled]; v != "" && v != "false" {
		return nil, fmt.Errorf("lake: catalog property %s=%q: remote S3 request signing is not supported", icebergio.S3RemoteSigningEnabled, v)
	}
	cfg.HTTPClient = bc
	return &cfg, nil
}

// connectTimeout parses s3.connect-timeout as iceberg-go does: seconds as
// a number ("60", "2.5") or a Go duration ("1m"), positive.
func connectTimeout(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if secs, nerr := strconv.ParseFloat(v, 64); nerr == nil {
		d, err = time.Duration(secs*float64(time.Second)), nil
	}
	if err != nil || d <= 0 {
		return 0, errors.New("want a positive number of seconds or a duration such as 30s")
	}
	return d, nil
}
