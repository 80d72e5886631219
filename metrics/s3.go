package metrics

// S3Retries counts S3 requests the AWS SDK sent again after a retryable
// failure, by SDK operation (PutObject, UploadPart, GetObject, ...) and
// reason (throttled, server_error, timeout, connection, other: see
// s3store's Retry* reasons). It rises before any step fails, which is
// the point: a degraded store shows here while retries still succeed.
const S3Retries = "retrain_s3_retries_total"

// S3RetriesHelp is S3Retries's HELP text.
const S3RetriesHelp = "S3 requests sent again after a retryable failure (503 SlowDown, reset or refused connection, ...), by SDK operation and reason."

// CountS3Retry adds one retry of operation for reason to S3Retries. It
// records outside any SDK metrics handler: S3 requests are made by the
// object store, which knows nothing of Temporal's tags.
func (r *Registry) CountS3Retry(operation, reason string) {
	counter{r.get(S3Retries, kindCounter, map[string]string{"operation": operation, "reason": reason})}.Inc(1)
}

// S3Requests counts the S3 requests sent (each attempt of an operation),
// by SDK operation and the type of the node whose attempt sent them
// (node_type is empty outside a node: a worker's own requests).
const S3Requests = "retrain_s3_requests_total"

// S3RequestsHelp is S3Requests's HELP text.
const S3RequestsHelp = "S3 requests sent (every attempt), by SDK operation and node type."

// S3Bytes counts the bytes those requests moved: uploaded bodies and the
// announced length of downloads.
const S3Bytes = "retrain_s3_bytes_total"

// S3BytesHelp is S3Bytes's HELP text.
const S3BytesHelp = "Bytes moved by S3 requests (uploads sent, downloads' Content-Length), by SDK operation and node type."

// CountS3Request adds one request of operation by a node of nodeType,
// moving bytes, to S3Requests and S3Bytes.
func (r *Registry) CountS3Request(operation, nodeType string, bytes int64) {
	labels := map[string]string{"operation": operation, "node_type": nodeType}
	counter{r.get(S3Requests, kindCounter, labels)}.Inc(1)
	if bytes > 0 {
		counter{r.get(S3Bytes, kindCounter, labels)}.Inc(bytes)
	}
}
