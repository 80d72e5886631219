package main

import (
	"strings"
	"testing"
)

// A stream as go test -json writes it for four packages: one passing
// with a skipped test, one with a failed subtest, one that timed out
// inside a test, one without test files.
const stream = `{"Action":"start","Package":"m/a"}
{"Action":"run","Package":"m/a","Test":"TestOK"}
{"Action":"output","Package":"m/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"output","Package":"m/a","Test":"TestOK","Output":"--- PASS: TestOK (1.50s)\n"}
{"Action":"pass","Package":"m/a","Test":"TestOK","Elapsed":1.5}
{"Action":"run","Package":"m/a","Test":"TestTorch"}
{"Action":"output","Package":"m/a","Test":"TestTorch","Output":"=== RUN   TestTorch\n"}
{"Action":"output","Package":"m/a","Test":"TestTorch","Output":"time=2026-11-28T04:16:31Z level=ERROR msg=\"another test's worker\"\n"}
{"Action":"output","Package":"m/a","Test":"TestTorch","Output":"    torch_test.go:10: no torch: apt-get install python3-torch\n"}
{"Action":"output","Package":"m/a","Test":"TestTorch","Output":"--- SKIP: TestTorch (0.00s)\n"}
{"Action":"skip","Package":"m/a","Test":"TestTorch","Elapsed":0}
{"Action":"output","Package":"m/a","Output":"PASS\n"}
{"Action":"output","Package":"m/a","Output":"ok  \tm/a\t1.6s\n"}
{"Action":"pass","Package":"m/a","Elapsed":1.6}
{"Action":"start","Package":"m/b"}
{"Action":"run","Package":"m/b","Test":"TestParent"}
{"Action":"output","Package":"m/b","Test":"TestParent","Output":"=== RUN   TestParent\n"}
{"Action":"run","Package":"m/b","Test":"TestParent/sub"}
{"Action":"output","Package":"m/b","Test":"TestParent/sub","Output":"=== RUN   TestParent/sub\n"}
{"Action":"output","Package":"m/b","Test":"TestParent/sub","Output":"    b_test.go:7: got 2, want 3\n"}
{"Action":"output","Package":"m/b","Test":"TestParent/sub","Output":"    --- FAIL: TestParent/sub (0.10s)\n"}
{"Action":"fail","Package":"m/b","Test":"TestParent/sub","Elapsed":0.1}
{"Action":"output","Package":"m/b","Test":"TestParent","Output":"--- FAIL: TestParent (0.20s)\n"}
{"Action":"fail","Package":"m/b","Test":"TestParent","Elapsed":0.2}
{"Action":"output","Package":"m/b","Output":"FAIL\n"}
{"Action":"output","Package":"m/b","Output":"FAIL\tm/b\t0.3s\n"}
{"Action":"fail","Package":"m/b","Elapsed":0.3}
{"Action":"start","Package":"m/c"}
{"Action":"run","Package":"m/c","Test":"TestDone"}
{"Action":"pass","Package":"m/c","Test":"TestDone","Elapsed":3}
{"Action":"run","Package":"m/c","Test":"TestHang"}
{"Action":"output","Package":"m/c","Test":"TestHang","Output":"=== RUN   TestHang\n"}
{"Action":"output","Package":"m/c","Test":"TestHang","Output":"    c_test.go:9: waiting for the gang\n"}
{"Action":"output","Package":"m/c","Output":"panic: test timed out after 10m0s\n"}
{"Action":"output","Package":"m/c","Output":"FAIL\tm/c\t600.1s\n"}
{"Action":"fail","Package":"m/c","Elapsed":600.1}
not json: a line the go command wrote itself
{"Action":"start","Package":"m/d"}
{"Action":"output","Package":"m/d","Output":"?   \tm/d\t[no test files]\n"}
{"Action":"skip","Package":"m/d","Elapsed":0}
`

func TestSummary(t *testing.T) {
	var out strings.Builder
	s := newSummary(&out)
	if err := s.read(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	echoed := out.String()
	for _, want := range []string{
		"ok  \tm/a\t1.6s\n",
		"b_test.go:7: got 2, want 3\n    --- FAIL: TestParent/sub (0.10s)\n--- FAIL: TestParent (0.20s)\nFAIL\nFAIL\tm/b\t0.3s\n",
		"panic: test timed out after 10m0s\nFAIL\tm/c\t600.1s\n    c_test.go:9: waiting for the gang\n",
		"not json: a line the go command wrote itself\n",
		"?   \tm/d\t[no test files]\n",
	} {
		if !strings.Contains(echoed, want) {
			t.Errorf("echo lacks %q:\n%s", want, echoed)
		}
	}
	for _, unwanted := range []string{"=== RUN", "--- PASS", "PASS\n\n", "no torch"} {
		if strings.Contains(echoed, unwanted) {
			t.Errorf("echo has %q, which go test without -v does not print:\n%s", unwanted, echoed)
		}
	}

	var table strings.Builder
	s.writeTable(&table)
	got := table.String()
	for _, want := range []string{
		"m/a          2      1      0       1      1.6s\n",
		"m/b          2      0      2       0      0.3s\n",
		"m/c          2      1      0       0    600.1s\n",
		"m/a TestTorch: torch_test.go:10: no torch: apt-get install python3-torch\n",
		"6 tests ran: 2 passed, 2 failed, 1 skipped\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "m/d ") {
		t.Errorf("table lists a package without tests:\n%s", got)
	}
	if bad := s.failedPackages(); strings.Join(bad, ",") != "m/b,m/c" {
		t.Errorf("failed packages %v, want [m/b m/c]", bad)
	}

	var slow strings.Builder
	s.writeSlowest(&slow, 2)
	if want := "slowest 2 tests:\n  1.      3.0s  pass  m/c TestDone\n  2.      1.5s  pass  m/a TestOK\n"; !strings.Contains(slow.String(), want) {
		t.Errorf("slowest:\n%s\nwant\n%s", slow.String(), want)
	}
}

func TestSummaryAllPassed(t *testing.T) {
	s := newSummary(&strings.Builder{})
	_ = s.read(strings.NewReader(stream[:strings.Index(stream, `{"Action":"start","Package":"m/b"}`)]))
	if bad := s.failedPackages(); len(bad) != 0 {
		t.Errorf("failed packages %v, want none", bad)
	}
}

// TestSlowestLeavesOutTheQueue: a test that waited for a slot of its
// package's own queue is ranked by the time it ran, and the wait is shown.
func TestSlowestLeavesOutTheQueue(t *testing.T) {
	s := newSummary(&strings.Builder{})
	_ = s.read(strings.NewReader(`{"Action":"run","Package":"m/i","Test":"TestQueued"}
{"Action":"output","Package":"m/i","Test":"TestQueued","Output":"    parallel_test.go:40: queued 50.0s for a parallel slot\n"}
{"Action":"pass","Package":"m/i","Test":"TestQueued","Elapsed":60}
{"Action":"run","Package":"m/i","Test":"TestLong"}
{"Action":"pass","Package":"m/i","Test":"TestLong","Elapsed":20}
{"Action":"pass","Package":"m/i","Elapsed":80}
`))
	var slow strings.Builder
	s.writeSlowest(&slow, 2)
	if want := "  1.     20.0s  pass  TestLong\n  2.     10.0s  pass  TestQueued  (after 50.0s queued)\n"; !strings.Contains(slow.String(), want) {
		t.Errorf("slowest:\n%s\nwant\n%s", slow.String(), want)
	}
}
