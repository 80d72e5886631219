//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package devstack

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// dirLock is an exclusive advisory lock on DataDir/lockFileName. Two servers
// on one SQLite file would both claim the single history shard and keep
// stealing it from each other; the lock turns that into a clear error. The
// kernel drops the lock when the process dies, so a crashed stack never
// leaves a stale lock behind.
type dirLock struct{ f *os.File }

func lockDir(path string) (*dirLock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (%s)", errLocked, path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return &dirLock{f: f}, nil
}

func (l *dirLock) unlock() error {
	// Closing the descriptor releases the flock.
	return l.f.Close()
}
