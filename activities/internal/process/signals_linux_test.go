package process

import (
	"os"
	"os/signal"
	"syscall"
	"testing"
)

func TestCatches(t *testing.T) {
	if Catches(os.Getpid(), syscall.SIGUSR2) {
		t.Skip("this test process already catches SIGUSR2")
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR2)
	defer signal.Stop(ch)
	if !Catches(os.Getpid(), syscall.SIGUSR2) {
		t.Error("a process with a SIGUSR2 handler does not catch it")
	}
	if Catches(-1, syscall.SIGUSR2) {
		t.Error("no process catches anything")
	}
}
