//go:build unix

package process

import (
	"os/exec"
	"syscall"
)

// SetProcessGroup puts the command in a process group of its own so that
// cancellation can signal it and every child it spawned (torchrun's workers).
func SetProcessGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	setParentDeathSignal(cmd.SysProcAttr)
}

// signalGroup sends SIGTERM (or SIGKILL) to the command's process group.
// Errors are ignored: the group may already be gone.
func signalGroup(cmd *exec.Cmd, kill bool) {
	if cmd.Process == nil {
		return
	}
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
}
