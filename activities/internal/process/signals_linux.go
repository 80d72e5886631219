package process

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Catches reports whether process pid has a handler for sig (its
// /proc/PID/status SigCgt mask): sending it then does not kill the
// process, e.g. SIGUSR1 to a Python trainer that registered faulthandler
// for it.
func Catches(pid int, sig syscall.Signal) bool {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "SigCgt:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<(uint(sig)-1)) != 0
		}
	}
	return false
}

// AskStack sends SIGUSR1 to process pid when it catches it, and reports
// whether it did: a Python trainer that registered faulthandler for it
// (faulthandler.register(signal.SIGUSR1, all_threads=True)) prints every
// thread's stack on stderr. A process that does not catch it would die
// of it, and is not sent it.
func AskStack(pid int) bool {
	return Catches(pid, syscall.SIGUSR1) && syscall.Kill(pid, syscall.SIGUSR1) == nil
}
