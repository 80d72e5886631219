//go:build unix

package s3server

import (
	"os/exec"
	"syscall"
)

// detach puts the server in a process group of its own: Ctrl-C in a
// terminal goes to the dev stack, which then stops the server in order.
func detach(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}
