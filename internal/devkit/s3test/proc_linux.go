package s3test

import (
	"os/exec"
	"syscall"
)

// setProcAttr makes the kernel kill the server if the test binary dies
// without running its cleanups (a panic in another goroutine, a timeout,
// kill -9), so servers never outlive their tests.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
