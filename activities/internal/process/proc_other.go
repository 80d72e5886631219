//go:build unix && !linux

package process

import "syscall"

// setParentDeathSignal is Linux-only; elsewhere a killed worker's command
// runs on until it ends by itself.
func setParentDeathSignal(*syscall.SysProcAttr) {}
