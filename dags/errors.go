package dags

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Error is a problem in a spec file, at a position.
type Error struct {
	File string
	Line int // 1-based; 0 when the problem has no place in the file
	Col  int // 1-based; 0 when unknown
	Msg  string
}

// Error formats the error as "file:line:col: msg", the form editors and
// terminals turn into links. Unknown parts are left out.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		if b.Len() > 0 {
			b.WriteByte(':')
		}
		b.WriteString(strconv.Itoa(e.Line))
		if e.Col > 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(e.Col))
		}
	}
	if b.Len() == 0 {
		return e.Msg
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// ErrorList is a list of errors in one spec. Parse, Validate and Compile
// return one (as an error) so that a user sees every problem in one go;
// callers that want the positions use errors.As.
type ErrorList []*Error

// Error prints one error per line, in order of position.
func (l ErrorList) Error() string {
	switch len(l) {
	case 0:
		return "no errors"
	case 1:
		return l[0].Error()
	}
	sorted := slices.Clone(l)
	sorted.sort()
	var b strings.Builder
	for i, e := range sorted {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Err returns the list sorted by position as an error, or nil if it is
// empty. It exists so that a nil ErrorList never becomes a non-nil error.
func (l ErrorList) Err() error {
	if len(l) == 0 {
		return nil
	}
	l.sort()
	return l
}

func (l ErrorList) sort() {
	slices.SortStableFunc(l, func(a, b *Error) int {
		if c := cmp.Compare(a.Line, b.Line); c != 0 {
			return c
		}
		return cmp.Compare(a.Col, b.Col)
	})
}

// errs collects errors for one file.
type errs struct {
	file string
	list ErrorList
}

func (e *errs) at(pos Pos, format string, args ...any) {
	e.list = append(e.list, &Error{File: e.file, Line: pos.Line, Col: pos.Col, Msg: fmt.Sprintf(format, args...)})
}

// suggest returns the candidate closest to word when it is close enough to
// be a likely typo (edit distance at most 2, and less than the word's
// length so that short words do not match everything), else "".
func suggest(word string, candidates []string) string {
	best, bestDist := "", 3
	for _, c := range candidates {
		if strings.EqualFold(word, c) {
			return c // AUC for auc: a difference of case alone
		}
	}
	for _, c := range candidates {
		// The distance is at least the difference in length; skipping
		// those keeps a huge word from costing len(word) x len(c) each.
		if abs(len(word)-len(c)) >= bestDist {
			continue
		}
		if d := editDistance(word, c); d < bestDist && d < len(word) {
			best, bestDist = c, d
		}
	}
	return best
}

// DidYouMean is didYouMean for node types' checks: " (did you mean
// "auc"?)" when word is a likely typo of a candidate, else "".
func DidYouMean(word string, candidates []string) string { return didYouMean(word, candidates) }

// didYouMean formats suggest's answer as a message suffix.
func didYouMean(word string, candidates []string) string {
	if s := suggest(word, candidates); s != "" {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	return ""
}

// editDistance is the Levenshtein distance between a and b, by bytes (field
// names and ids are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
