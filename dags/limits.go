package dags

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Limits on what evaluating ${...} produces. A value's text is small, but
// what it evaluates to need not be: ${date_range('2000-01-01','2027-01-01')}
// is 43 bytes and gives ~130 KB, so a 40 KB param of them once gave 131 MB
// and took the workflow task 14 s and 1.4 GB, past the SDK's 1 s deadlock
// detector, and an 845-byte one gave 2.7 MB, past Temporal's 2 MiB payload
// limit. Either failure repeats on every attempt of the workflow task, and
// Temporal retries those forever. So every evaluation counts what it
// produces as it goes and stops at these limits with a LimitError: the
// work done is bounded by the limit, not by what the text asks for.
const (
	// MaxValueBytes bounds one value that evaluation builds: a string made
	// from a template ("a-${params.x}-b"), or what one function call gives
	// (a date_range list counts its JSON size). Payloads are limited to
	// 2 MiB and Temporal warns from 512 KiB; a node's input holds several
	// values plus its envelope, so one value stays well below both. The
	// longest date_range (10,000 days, ~130 KB) fits, twice.
	MaxValueBytes = 256 << 10
	// MaxResolvedBytes bounds everything one evaluation resolves together:
	// a node's whole `with` (literal text counted too), a foreach list,
	// all of a run's params that hold ${...}, one `when`. Half of the
	// 2 MiB payload limit, so the activity input or result that carries
	// it, with its other fields, is still recorded. A plain reference
	// (${nodes.a.outputs.files}) passes a value on without growing it, so
	// it counts here but not against MaxValueBytes.
	MaxResolvedBytes = 1 << 20
	// maxEvalWork bounds the bytes function calls produce in one
	// evaluation, whether they are returned or only compared
	// (date_range(a, b) == date_range(c, d) gives a bool, but builds two
	// lists): ~16 of the longest date_range, a few tens of milliseconds,
	// far below the 1 s the SDK allows a workflow task.
	maxEvalWork = 2 << 20
	// maxTemplateExprs bounds the expressions (${...} that are not plain
	// references) in one string. Each is compiled, ~0.2 ms, in the
	// workflow task too: 40 KB of distinct date_add calls took 225 ms.
	// A value needs one or two.
	maxTemplateExprs = 32
	// maxExprMemory is expr's own budget (vm.VM.MemoryBudget): the items
	// of ranges, arrays and maps its instructions make. This language
	// refuses the syntax that makes them, so it is a backstop only.
	maxExprMemory = 10000
)

// ErrTooLarge is what a LimitError matches with errors.Is.
var ErrTooLarge = errors.New("evaluation result too large")

// LimitError is an evaluation stopped at one of the limits above.
type LimitError struct {
	What  string // what grew past the limit, as a message says it
	Limit int    // in bytes
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s would be over %s, the limit on what ${...} evaluates to; put large data in a file or the object store and pass its path", e.What, bytesText(e.Limit))
}

// Is makes errors.Is(err, ErrTooLarge) true.
func (e *LimitError) Is(target error) bool { return target == ErrTooLarge }

// bytesText writes a limit as "256 KiB (262144 bytes)".
func bytesText(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB (%d bytes)", n>>20, n)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB (%d bytes)", n>>10, n)
	}
	return fmt.Sprintf("%d bytes", n)
}

// evalBudget counts what one evaluation (one Interpolate, one `when`, a
// run's params) has produced. A Scope carries it, so the template,
// expression and function calls inside one evaluation share it. It is
// not safe for concurrent use; each evaluation makes its own.
type evalBudget struct {
	resolved int // bytes of resolved values, against MaxResolvedBytes
	work     int // bytes function calls gave, against maxEvalWork
}

// bounded returns sc with a budget of its own unless it has one already
// (an evaluation inside another shares the outer one's).
func (sc Scope) bounded() Scope {
	if sc.budget == nil {
		sc.budget = &evalBudget{}
	}
	return sc
}

// grow accounts n more bytes of a value that already holds have bytes;
// it fails, before they are written, when the value or the whole
// evaluation would pass its limit.
func (sc Scope) grow(have, n int) error {
	if have+n > MaxValueBytes {
		return &LimitError{What: "the value", Limit: MaxValueBytes}
	}
	return sc.resolved(n)
}

// resolved accounts n bytes of resolved value against MaxResolvedBytes.
func (sc Scope) resolved(n int) error {
	if sc.budget == nil {
		return nil
	}
	sc.budget.resolved += n
	if sc.budget.resolved > MaxResolvedBytes {
		return &LimitError{What: "everything resolved together", Limit: MaxResolvedBytes}
	}
	return nil
}

// spent accounts a function's result: it must fit MaxValueBytes by
// itself, and the evaluation's function results maxEvalWork together.
func (sc Scope) spent(fn string, v any) error {
	n := sizeOf(v, MaxValueBytes)
	if n > MaxValueBytes {
		return &LimitError{What: "what " + fn + " gives", Limit: MaxValueBytes}
	}
	if sc.budget == nil {
		return nil
	}
	sc.budget.work += n
	if sc.budget.work > maxEvalWork {
		return &LimitError{What: "what the expressions' functions give together", Limit: maxEvalWork}
	}
	return nil
}

// sizeOf estimates the bytes of v as JSON, which is what format makes of
// a list or map and what a payload holds. It stops counting once past
// limit, returning a number above it: a value of many megabytes costs no
// more to refuse than one just over the limit.
func sizeOf(v any, limit int) int {
	n := 0
	var walk func(v any) bool
	add := func(k int) bool {
		n += k
		return n <= limit
	}
	walk = func(v any) bool {
		switch x := v.(type) {
		case string:
			return add(len(x) + 2)
		case map[string]any:
			if !add(2) {
				return false
			}
			for k, item := range x {
				if !add(len(k)+4) || !walk(item) {
					return false
				}
			}
			return true
		case []any:
			if !add(2) {
				return false
			}
			for _, item := range x {
				if !add(1) || !walk(item) {
					return false
				}
			}
			return true
		case map[string]string:
			for k, s := range x {
				if !add(len(k) + len(s) + 6) {
					return false
				}
			}
			return add(2)
		case []string:
			for _, s := range x {
				if !add(len(s) + 3) {
					return false
				}
			}
			return add(2)
		case nil:
			return add(4)
		case bool:
			return add(5)
		}
		return add(8) // a number
	}
	walk(v)
	return n
}

// checkParamValues evaluates, at Compile, the params whose values are
// expressions of constants (no run values): their result is known now, so
// one too large fails the run before it starts, naming the param, instead
// of in the workflow. Params that use run values are evaluated by
// ResolveRunParams when the run knows them, under the same limits.
func checkParamValues(e *errs, s *Spec, bound map[string]any) {
	budget := &evalBudget{} // the params together, as ResolveRunParams counts them
	for _, name := range slices.Sorted(maps.Keys(bound)) {
		str, ok := bound[name].(string)
		if !ok || !HasRef(str) {
			continue
		}
		pos := Pos{}
		if p := s.Param(name); p != nil {
			pos = p.Pos
		}
		// The workflow parses it again, run values or not: text beyond
		// the value limit is refused before anything is evaluated.
		if len(str) > MaxValueBytes {
			e.at(pos, "param %q: a value holding ${...} is %d bytes; the limit is %s", name, len(str), bytesText(MaxValueBytes))
			continue
		}
		refs, err := Refs(str)
		if err != nil || slices.ContainsFunc(refs, func(r Ref) bool { return r.Kind == "run" }) {
			continue // a malformed one is reported by BindParams
		}
		if _, err := Interpolate(str, Scope{budget: budget}); err != nil {
			e.at(pos, "param %q: %v", name, err)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
