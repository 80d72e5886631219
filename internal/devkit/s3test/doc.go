// Package s3test starts real S3 servers for tests: versitygw v1.8.0 with its
// POSIX backend, one process per [Start], listening on a free loopback port
// and storing objects in the test's temporary directory.
//
// The versitygw binary is taken from $VERSITYGW, else from PATH when it
// reports the pinned version, else built once from the module in the module
// cache and kept under the Go build cache's parent directory
// (retrain-tools/versitygw-<version>/). The first build takes a few minutes;
// concurrent test binaries wait for it on a file lock instead of building it
// twice. A server that cannot be started fails the test: tests that need S3
// are never silently skipped.
//
// versitygw's POSIX backend keeps object metadata (ETags, checksums) in user
// extended attributes. Start checks that the temporary directory supports
// them and otherwise has versitygw keep metadata in a sidecar directory;
// S3TEST_METADATA=sidecar forces that mode.
package s3test
