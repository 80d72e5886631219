package s3store

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// defaultResponseHeaderTimeout bounds the wait for the first byte of an
// answer once a request has been sent in full. An S3 server answers a
// request it has received within a second or two, even a large part's
// upload or a multipart completion (AWS sends the 200 at once and keeps
// the connection alive with whitespace while it assembles the object),
// so 30 s only ever cuts off a server that took the request and went
// silent: without a bound such a request waits for its step's timeout,
// with one it is retried like a reset connection. The clock starts after
// the request body is written, so it does not limit how long an upload
// may take to send, nor how long a download's body may take to arrive.
const defaultResponseHeaderTimeout = 30 * time.Second

// AWSConfig returns the AWS configuration a Store opened with cfg sends
// its requests with, for S3 clients that s3store does not build itself
// (the lake's Iceberg table IO): the region and credentials resolved as
// Open resolves them (and checked now, within cfg.OpenTimeout), the retry
// policy (cfg.MaxAttempts, cfg.MaxBackoff), the retry counting and
// logging (a warning to cfg.Logger and a call of cfg.OnRetry for each
// request sent again) and the HTTP client's cfg.ResponseHeaderTimeout.
// cfg.Endpoint, when set, is the BaseEndpoint; cfg.URI and the upload
// settings are not used. Clients built from the configuration should
// address buckets by path (UsePathStyle) for S3-compatible servers, as
// the Store does when cfg.UsePathStyle is set.
func AWSConfig(ctx context.Context, cfg Config) (aws.Config, error) {
	if err := checkConfig(cfg); err != nil {
		return aws.Config{}, err
	}
	rc := &retryCounter{log: cmp.Or(cfg.Logger, slog.Default()), onRetry: cfg.OnRetry}
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(cfg.OpenTimeout, defaultOpenTimeout))
	defer cancel()
	return loadAWSConfig(ctx, cfg, rc)
}

// checkConfig rejects settings no store can work with.
func checkConfig(cfg Config) error {
	if cfg.AccessKeyID != "" && cfg.SecretAccessKey == "" {
		return newError(opOpen, "", nil, "AccessKeyID is set but SecretAccessKey is empty")
	}
	if cfg.MaxAttempts < 0 || cfg.MaxBackoff < 0 {
		return newError(opOpen, "", nil, fmt.Sprintf("MaxAttempts %d and MaxBackoff %v must not be negative (0 takes the default)", cfg.MaxAttempts, cfg.MaxBackoff))
	}
	if cfg.ResponseHeaderTimeout < 0 {
		return newError(opOpen, "", nil, fmt.Sprintf("ResponseHeaderTimeout %v must not be negative (0 takes the default, %v)", cfg.ResponseHeaderTimeout, defaultResponseHeaderTimeout))
	}
	return nil
}

// loadAWSConfig resolves the region and the credentials of cfg, so that a
// missing or broken credential chain is reported now rather than by the
// first request, and sets rc.redact to remove the secret values from
// messages even when they came from the chain. Every request sent with the
// configuration follows the retry policy and is counted by rc.
func loadAWSConfig(ctx context.Context, cfg Config, rc *retryCounter) (aws.Config, error) {
	// Until the credentials are known, redact whatever the caller gave.
	rc.redact = newRedactor(cfg.SecretAccessKey, cfg.SessionToken, cfg.AccessKeyID)
	var loadOpts []func(*config.LoadOptions) error
	if cfg.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(cfg.Region))
	}
	if cfg.AccessKeyID != "" {
		loadOpts = append(loadOpts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken)))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return aws.Config{}, newError(opOpen, "", nil, rc.redact.String("load AWS configuration: "+err.Error()))
	}
	awsCfg.Region = cmp.Or(awsCfg.Region, defaultRegion)
	creds, err := awsCfg.Credentials.Retrieve(ctx)
	if err != nil {
		return aws.Config{}, newError(opOpen, "", ErrAccessDenied, rc.redact.String(
			"no usable AWS credentials: set them in the Config or via AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY: "+err.Error()))
	}
	rc.redact = newRedactor(cfg.SecretAccessKey, cfg.SessionToken, cfg.AccessKeyID,
		creds.SecretAccessKey, creds.SessionToken, creds.AccessKeyID)

	awsCfg.Retryer = func() aws.Retryer { return retryer(cfg) }
	awsCfg.APIOptions = append(awsCfg.APIOptions, rc.countRetries, requestCounter{onRequest: cfg.OnRequest}.countRequests)
	timeout := cmp.Or(cfg.ResponseHeaderTimeout, defaultResponseHeaderTimeout)
	awsCfg.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.ResponseHeaderTimeout = timeout
	})
	if cfg.Endpoint != "" {
		awsCfg.BaseEndpoint = aws.String(cfg.Endpoint)
	}
	return awsCfg, nil
}
