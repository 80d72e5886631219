package s3test

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// probeXattr checks that files in dir can carry user extended attributes.
func probeXattr(dir string) error {
	f, err := os.CreateTemp(dir, ".xattr-probe-")
	if err != nil {
		return err
	}
	name := f.Name()
	f.Close()
	defer os.Remove(name)
	if err := syscall.Setxattr(name, "user.s3test", []byte("1"), 0); err != nil {
		return fmt.Errorf("%w on %s: %v", errNoXattr, filepath.Dir(name), err)
	}
	return nil
}
