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
