//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package devstack

import "os"

// dirLock on platforms without flock only checks that the lock file can be
// created (a writable data dir); it does not exclude a second stack.
type dirLock struct{ f *os.File }

func lockDir(path string) (*dirLock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	return &dirLock{f: f}, nil
}

func (l *dirLock) unlock() error { return l.f.Close() }
