package process

import "syscall"

// setParentDeathSignal makes the kernel kill the command if the worker dies
// (SIGKILL, OOM): the retried attempt on another worker must not race a
// leftover process writing the same outputs.
func setParentDeathSignal(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGKILL
}
