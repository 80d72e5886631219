package gatewayproc

import (
	"fmt"
	"os"
	"syscall"
)

// ProbeXattr checks that files in dir can carry user extended attributes,
// where versitygw's POSIX backend keeps object metadata (ETags, checksums).
// Where they cannot, the error wraps [ErrNoXattr].
func ProbeXattr(dir string) error {
	f, err := os.CreateTemp(dir, ".xattr-probe-")
	if err != nil {
		return err
	}
	name := f.Name()
	f.Close()
	defer os.Remove(name)
	if err := syscall.Setxattr(name, "user.retrain", []byte("1"), 0); err != nil {
		return fmt.Errorf("%w in %s: %v", ErrNoXattr, dir, err)
	}
	return nil
}
