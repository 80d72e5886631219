//go:build !linux

package s3server

import "errors"

// probeXattr reports extended attributes unsupported off Linux, where the
// probe is not implemented; metadata then goes to a sidecar directory.
func probeXattr(string) error {
	return errors.New("extended attributes are only probed on Linux")
}
