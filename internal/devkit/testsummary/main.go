// Command testsummary reads `go test -json` on stdin and prints what
// `go test` prints without -v (each package's ok or FAIL line, the output
// of every failed test), then how many tests ran, passed, failed and
// skipped in each package, every skipped test with its reason, and a
// closing "N tests ran: N passed, N failed, N skipped" line. It exits 1
// when a package failed or never finished, so a CI script can pipe into
// it. .ci/run uses it; docs/development.md has the timing report:
//
//	go test -count=1 -json ./integration/ | go run ./internal/devkit/testsummary -slowest 15
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	slowest := flag.Int("slowest", 0, "also list the `N` slowest top-level tests")
	flag.Parse()
	s := newSummary(os.Stdout)
	if err := s.read(os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary: reading go test -json:", err)
		os.Exit(1)
	}
	s.writeTable(os.Stdout)
	if *slowest > 0 {
		s.writeSlowest(os.Stdout, *slowest)
	}
	if len(s.order) == 0 {
		fmt.Fprintln(os.Stderr, "testsummary: no go test -json events on stdin")
		os.Exit(1)
	}
	if bad := s.failedPackages(); len(bad) > 0 {
		fmt.Fprintf(os.Stderr, "testsummary: %d package(s) failed: %v\n", len(bad), bad)
		os.Exit(1)
	}
}
