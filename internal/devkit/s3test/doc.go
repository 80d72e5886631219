// Package s3test starts real S3 servers for tests: the dev stack's
// versitygw gateway with its POSIX backend (devstack/s3server), one process
// per [Start], listening on a free loopback port and storing objects in the
// test's temporary directory.
//
// The server is a small program of this module (devstack/s3server/gateway)
// that links the same gateway as `retrain dev`, at the versitygw version
// go.mod pins. It is built with the go tool into the Go build cache's
// parent directory (retrain-tools/s3gateway-<checkout>/); its packages are
// those the dev stack's own tests compile, so the first build mostly links,
// and later ones find it up to date. Concurrent test binaries wait on a
// file lock instead of building it twice. $S3TEST_GATEWAY names a built
// gateway instead, for test binaries run without the go tool. A server that
// cannot be started fails the test: tests that need S3 are never silently
// skipped.
//
// versitygw's POSIX backend keeps object metadata (ETags, checksums) in user
// extended attributes. Start checks that the temporary directory supports
// them and otherwise has versitygw keep metadata in a sidecar directory;
// S3TEST_METADATA=sidecar forces that mode.
package s3test
