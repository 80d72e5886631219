//go:build !linux

package process

import "syscall"

// Catches is not known off Linux: no signal is sent.
func Catches(int, syscall.Signal) bool { return false }

// AskStack sends nothing off Linux.
func AskStack(int) bool { return false }
