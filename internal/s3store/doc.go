// Package s3store is retrain's access layer to S3-compatible object storage.
//
// A [Store] is bound to one location, s3://bucket/prefix, and every key it
// accepts is relative to that prefix. Keys are validated before any request is
// made, so a caller can never reach outside the prefix with "..", an absolute
// key or an empty path segment.
//
// The Store offers the few primitives that checkpoints and the model registry
// are built from:
//
//   - streaming uploads (multipart through the SDK's transfer manager) and
//     downloads, both protected by a full-object CRC32C checksum that the
//     server validates on write and the Store verifies on read. CRC32C
//     rather than SHA-256 because S3 can combine the CRC32C checksums of
//     parts into one for the whole object (checksum type FULL_OBJECT),
//     which it cannot do for SHA-256: so every object, multipart or not,
//     can be verified by a plain GET;
//   - conditional writes: [Store.PutIfAbsent] (If-None-Match: *) and
//     [Store.PutIfMatch] (compare-and-swap on an ETag), which fail with
//     [ErrExists] and [ErrETagMismatch] so callers can build lock-free
//     protocols on top;
//   - paginated listing and deletion by prefix.
//
// Requests that fail in a retryable way (503 SlowDown and other 5xx,
// timeouts, refused or reset connections) are retried by the SDK up to
// [Config.MaxAttempts] times; each retry is counted ([Store.Retries]),
// logged at Warn and passed to [Config.OnRetry], so that a degraded store
// is visible while its requests still succeed (retry.go). A request with
// no answer [Config.ResponseHeaderTimeout] after it was sent is retried as
// a timeout. [AWSConfig] hands the same policy, counting and HTTP client to
// S3 clients that s3store does not build (the lake's Iceberg table IO).
//
// Errors returned by a Store are [*Error] values. They never carry the SDK
// error itself, only a message from which the configured credentials have
// been removed, so they are safe to log and to record in workflow history.
// Use errors.Is with the sentinel errors to classify them.
package s3store
