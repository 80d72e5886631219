package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output and build-fail events
	Test       string
	Elapsed    float64 // seconds
	Output     string
}

// testResult is how one test or subtest ended.
type testResult struct {
	Package, Name string
	Action        string // pass, fail, skip; "" while it has not ended
	Elapsed       time.Duration
	Queued        time.Duration // of Elapsed, the wait for a slot of its package's own queue
	output        []string      // its lines, kept for a failure or a skip
}

// queuedLine is how a package that queues its parallel tests itself
// (integration/parallel_test.go) logs a test's wait for a slot: go test
// counts that wait in the test's time, as it does not count its own.
var queuedLine = regexp.MustCompile(`^\s+\S+\.go:\d+: queued ([0-9.]+)s for a parallel slot`)

// pkgResult is one package's tally.
type pkgResult struct {
	Name                         string
	Action                       string // pass, fail, skip ("no test files"); "" if it never ended
	Elapsed                      time.Duration
	Ran, Passed, Failed, Skipped int
	tests                        map[string]*testResult
	order                        []*testResult
}

// summary reads a `go test -json` stream, echoing what `go test` without
// -v prints (each package's ok/FAIL line, the output of the tests that
// failed) as it goes.
type summary struct {
	out      io.Writer
	pkgs     map[string]*pkgResult
	order    []*pkgResult
	badLines int
}

func newSummary(out io.Writer) *summary {
	return &summary{out: out, pkgs: map[string]*pkgResult{}}
}

func (s *summary) pkg(name string) *pkgResult {
	p := s.pkgs[name]
	if p == nil {
		p = &pkgResult{Name: name, tests: map[string]*testResult{}}
		s.pkgs[name] = p
		s.order = append(s.order, p)
	}
	return p
}

// read consumes the stream. Lines that are not JSON (the go command's own
// messages when stderr is merged) are echoed as they are.
func (s *summary) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			s.badLines++
			fmt.Fprintf(s.out, "%s\n", line)
			continue
		}
		s.add(e)
	}
	return sc.Err()
}

func (s *summary) add(e event) {
	switch e.Action {
	case "build-output":
		fmt.Fprint(s.out, e.Output)
		return
	case "build-fail":
		return // the package's own fail event follows
	}
	if e.Package == "" {
		return
	}
	p := s.pkg(e.Package)
	if e.Test == "" {
		switch e.Action {
		case "output":
			// Package-level lines: ok/FAIL/"no test files", panics and
			// timeouts outside a test. The bare PASS of a passing
			// package is noise without -v.
			if e.Output != "PASS\n" && !strings.HasPrefix(e.Output, "=== ") {
				fmt.Fprint(s.out, e.Output)
			}
		case "pass", "fail", "skip":
			p.Action = e.Action
			p.Elapsed = seconds(e.Elapsed)
			if e.Action == "fail" {
				// A test still running when its package failed (a
				// timeout, a panic) has no fail event of its own.
				for _, t := range p.order {
					if t.Action == "" {
						s.echo(t)
					}
				}
			}
		}
		return
	}
	t := p.tests[e.Test]
	if t == nil {
		t = &testResult{Package: e.Package, Name: e.Test}
		p.tests[e.Test] = t
		p.order = append(p.order, t)
	}
	switch e.Action {
	case "run":
		p.Ran++
	case "output":
		t.output = append(t.output, e.Output)
		if m := queuedLine.FindStringSubmatch(e.Output); m != nil {
			var q float64
			fmt.Sscan(m[1], &q)
			t.Queued = seconds(q)
		}
	case "pass", "fail", "skip":
		t.Action = e.Action
		t.Elapsed = seconds(e.Elapsed)
		switch e.Action {
		case "pass":
			p.Passed++
			t.output = nil
		case "fail":
			p.Failed++
			// Each test's lines are its own (test2json attributes a
			// subtest's to it), and a subtest ends before its parent:
			// the output reads as go test's without -v.
			s.echo(t)
			t.output = nil
		case "skip":
			p.Skipped++
		}
	}
}

// echo prints a test's kept lines, less the === framing -v adds.
func (s *summary) echo(t *testResult) {
	for _, l := range t.output {
		if strings.HasPrefix(strings.TrimLeft(l, " "), "=== ") {
			continue
		}
		fmt.Fprint(s.out, l)
	}
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

// totals adds up every package.
func (s *summary) totals() (ran, passed, failed, skipped int) {
	for _, p := range s.order {
		ran += p.Ran
		passed += p.Passed
		failed += p.Failed
		skipped += p.Skipped
	}
	return
}

// failedPackages are the packages whose run failed or never ended.
func (s *summary) failedPackages() []string {
	var bad []string
	for _, p := range s.order {
		if p.Action == "fail" || p.Action == "" || p.Failed > 0 {
			bad = append(bad, p.Name)
		}
	}
	return bad
}

// writeTable prints, per package with tests, how many ran, passed,
// failed and skipped (tests and subtests alike), then every skipped test
// with the reason it gave, then the totals.
func (s *summary) writeTable(w io.Writer) {
	width := len("package")
	for _, p := range s.order {
		width = max(width, len(p.Name))
	}
	fmt.Fprintf(w, "\n%-*s %6s %6s %6s %7s %9s\n", width, "package", "ran", "passed", "failed", "skipped", "time")
	for _, p := range s.order {
		if p.Ran == 0 && p.Action == "skip" {
			continue // no test files
		}
		fmt.Fprintf(w, "%-*s %6d %6d %6d %7d %8.1fs\n", width, p.Name, p.Ran, p.Passed, p.Failed, p.Skipped, p.Elapsed.Seconds())
	}
	var skipped []*testResult
	for _, p := range s.order {
		for _, t := range p.order {
			if t.Action == "skip" {
				skipped = append(skipped, t)
			}
		}
	}
	if len(skipped) > 0 {
		fmt.Fprintf(w, "\nskipped:\n")
		for _, t := range skipped {
			fmt.Fprintf(w, "  %s %s: %s\n", t.Package, t.Name, skipReason(t.output))
		}
	}
	ran, passed, failed, skipped2 := s.totals()
	fmt.Fprintf(w, "\n%d tests ran: %d passed, %d failed, %d skipped\n", ran, passed, failed, skipped2)
}

// testLog matches a line t.Log or t.Skip wrote: "name_test.go:12: ...".
var testLog = regexp.MustCompile(`^[\w.-]+\.go:\d+: `)

// skipReason is what t.Skip said: the lines between the test's start and
// its --- SKIP line, joined.
func skipReason(lines []string) string {
	var parts, logged []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		parts = append(parts, l)
		if testLog.MatchString(l) {
			logged = append(logged, l)
		}
	}
	// With parallel tests, go test -json may attribute stray process
	// output (a logger writing to stdout) to a test: what t.Skip said is
	// the test's own file:line lines.
	if len(logged) > 0 {
		parts = logged
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	r := strings.Join(parts, " ")
	if len(r) > 300 {
		r = r[:300] + "..."
	}
	return r
}

// writeSlowest prints the n slowest top-level tests (subtests are inside
// their parent's time), slowest first, by the time they ran: a wait for a
// slot of their package's own queue is left out, and shown.
func (s *summary) writeSlowest(w io.Writer, n int) {
	var all []*testResult
	for _, p := range s.order {
		for _, t := range p.order {
			if !strings.Contains(t.Name, "/") && t.Action != "" {
				all = append(all, t)
			}
		}
	}
	ran := func(t *testResult) time.Duration { return t.Elapsed - t.Queued }
	slices.SortStableFunc(all, func(a, b *testResult) int { return int(ran(b) - ran(a)) })
	all = all[:min(n, len(all))]
	fmt.Fprintf(w, "\nslowest %d tests:\n", len(all))
	multi := len(s.order) > 1
	for i, t := range all {
		name := t.Name
		if multi {
			name = t.Package + " " + name
		}
		queued := ""
		if t.Queued > 0 {
			queued = fmt.Sprintf("  (after %.1fs queued)", t.Queued.Seconds())
		}
		fmt.Fprintf(w, "%3d. %8.1fs  %s  %s%s\n", i+1, ran(t).Seconds(), t.Action, name, queued)
	}
}
