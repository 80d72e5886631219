package integration

import (
	"cmp"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The package's parallel tests are admitted longest first.
//
// go test releases every paused parallel test at once when the sequential
// ones end, and they then take its -parallel slots in whatever order their
// goroutines happen to run: a two-minute test could start last and keep
// the package running alone for its whole length. So go test's own limit
// is raised out of the way (defaultParallel) and the tests queue here
// instead, for slots handed out by expected length (longest processing
// time first, the classic rule for scheduling jobs on parallel machines).
// Subtests that call t.Parallel themselves are not queued here: their
// parent holds a slot while they run.

// admitAfter is how long the first request waits for the others to queue
// before any slot is handed out: they all arrive within milliseconds of
// each other when go test releases them.
const admitAfter = 200 * time.Millisecond

// parallel runs t in parallel with the package's other parallel tests,
// queued as a short test.
func parallel(t *testing.T) { parallelFor(t, 0) }

// parallelFor runs t in parallel, queued by expect: how long it takes on
// a quiet 2-core machine (docs/development.md's timing table). Only the
// order depends on it.
func parallelFor(t *testing.T, expect time.Duration) {
	t.Helper()
	queue(t, expect, false)
}

// parallelTorch is parallelFor for a test whose time is mostly PyTorch
// processes computing: at most GOMAXPROCS of them run at once, as more
// only share the same cores, and every one of them slowed down (admitted
// longest first, the five torch tests had started together and each took
// twice as long).
func parallelTorch(t *testing.T, expect time.Duration) {
	t.Helper()
	queue(t, expect, true)
}

func queue(t *testing.T, expect time.Duration, heavy bool) {
	t.Helper()
	t.Parallel()
	queued := time.Now()
	testSlots.acquire(expect, heavy)
	t.Cleanup(func() { testSlots.release(heavy) })
	// go test counts the wait in the test's time; the suite's summary
	// (internal/devkit/testsummary) reads this line to leave it out.
	t.Logf("queued %.1fs for a parallel slot", time.Since(queued).Seconds())
}

// testSlots is the package's queue: tests are the one place that shares
// it, as go test shares its own -parallel slots.
var testSlots = &slots{heavyLimit: runtime.GOMAXPROCS(0)}

type slots struct {
	mu         sync.Mutex
	limit      int  // slots in all; set by defaultParallel
	heavyLimit int  // of them, slots for heavy (torch) tests
	used       int  // slots held
	heavyUsed  int  // heavy slots held
	open       bool // admitAfter has passed since the first request
	started    bool // the first request came
	arrived    int  // requests so far
	queue      []*waiter
}

type waiter struct {
	expect time.Duration
	heavy  bool
	seq    int // arrival order, to break ties
	ready  chan struct{}
}

func (s *slots) acquire(expect time.Duration, heavy bool) {
	s.mu.Lock()
	s.arrived++
	w := &waiter{expect: expect, heavy: heavy, seq: s.arrived, ready: make(chan struct{})}
	s.queue = append(s.queue, w)
	if !s.started {
		s.started = true
		time.AfterFunc(admitAfter, func() {
			s.mu.Lock()
			s.open = true
			s.admit()
			s.mu.Unlock()
		})
	}
	s.admit()
	s.mu.Unlock()
	<-w.ready
}

func (s *slots) release(heavy bool) {
	s.mu.Lock()
	s.used--
	if heavy {
		s.heavyUsed--
	}
	s.admit()
	s.mu.Unlock()
}

// admit hands free slots to the longest waiting tests that fit (a heavy
// test only while a heavy slot is free); s.mu is held.
func (s *slots) admit() {
	if !s.open {
		return
	}
	slices.SortStableFunc(s.queue, func(a, b *waiter) int {
		if a.expect != b.expect {
			return cmp.Compare(b.expect, a.expect)
		}
		return cmp.Compare(a.seq, b.seq)
	})
	limit, heavyLimit := max(s.limit, 1), max(s.heavyLimit, 1)
	kept := s.queue[:0]
	for _, w := range s.queue {
		if s.used < limit && (!w.heavy || s.heavyUsed < heavyLimit) {
			s.used++
			if w.heavy {
				s.heavyUsed++
			}
			close(w.ready)
			continue
		}
		kept = append(kept, w)
	}
	s.queue = kept
}

// TestSlotsAdmitLongestFirst: requests that arrive together are admitted
// by expected length, longest first, one slot at a time.
func TestSlotsAdmitLongestFirst(t *testing.T) {
	s := &slots{limit: 1, heavyLimit: 1}
	var mu sync.Mutex
	var order []time.Duration
	var wg sync.WaitGroup
	for _, d := range []time.Duration{1, 5, 3, 0, 4} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.acquire(d, false)
			mu.Lock()
			order = append(order, d)
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
			s.release(false)
		}()
	}
	wg.Wait()
	want := []time.Duration{5, 4, 3, 1, 0}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("admitted %v, want %v", order, want)
	}
}

// TestParallelTestsQueue: every top-level test of the package that runs
// in parallel does so through parallel or parallelFor. One that called
// t.Parallel itself would skip the queue (go test's own limit is lifted
// out of its way) and run beside every other at once.
func TestParallelTestsQueue(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files in the package folder: %v", err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Body == nil {
				continue
			}
			for _, st := range fn.Body.List {
				call, ok := st.(*ast.ExprStmt)
				if !ok {
					continue
				}
				c, ok := call.X.(*ast.CallExpr)
				if !ok {
					continue
				}
				if sel, ok := c.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Parallel" {
					t.Errorf("%s: %s calls t.Parallel(): call parallel(t) or parallelFor(t, d) instead", fset.Position(c.Pos()), fn.Name.Name)
				}
			}
		}
	}
}

// TestSlotsBoundHeavyTests: heavy tests take at most heavyLimit slots; a
// lighter test goes ahead of a longer heavy one that does not fit.
func TestSlotsBoundHeavyTests(t *testing.T) {
	s := &slots{limit: 3, heavyLimit: 1, open: true, started: true}
	first := make(chan struct{})
	go func() { s.acquire(9, true); close(first) }()
	<-first
	admitted := make(chan time.Duration, 3)
	for _, w := range []struct {
		d     time.Duration
		heavy bool
	}{{8, true}, {1, false}} {
		go func() { s.acquire(w.d, w.heavy); admitted <- w.d }()
	}
	if got := <-admitted; got != 1 {
		t.Fatalf("admitted %v first, want the light test while the heavy slot is held", got)
	}
	select {
	case got := <-admitted:
		t.Fatalf("admitted %v beside another heavy test", got)
	case <-time.After(100 * time.Millisecond):
	}
	s.release(true)
	if got := <-admitted; got != 8 {
		t.Fatalf("admitted %v, want the heavy test once the heavy slot is free", got)
	}
}
