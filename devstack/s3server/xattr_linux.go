package s3server

import (
	"fmt"
	"os"
	"syscall"
)

// probeXattr checks that files in dir can carry user extended attributes,
// where versitygw keeps object metadata.
func probeXattr(dir string) error {
	f, err := os.CreateTemp(dir, ".xattr-probe-")
	if err != nil {
		return err
	}
	name := f.Name()
	f.Close()
	defer os.Remove(name)
	if err := syscall.Setxattr(name, "user.retrain", []byte("1"), 0); err != nil {
		return fmt.Errorf("no user extended attributes in %s: %v", dir, err)
	}
	return nil
}
