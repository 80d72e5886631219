package dags

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
)

// Expressions in values. A ${...} that is not a plain reference is an
// expression in the `when` language, compiled by the same code (see
// compileWhen) with the same limits, but with two differences: references
// are written bare (params.NAME, nodes.ID.outputs.KEY, run.NAME; the
// surrounding ${} already marks the text as code), and the value is the
// expression's value, not its truth:
//
//	${date_add(run.logical_date, -1)}      "2026-11-22"
//	${date_range(params.from, params.to)}  a list of dates
//
// Quoted strings inside are plain text (no ${} in them), so expressions
// never nest.

// pathLikeRe matches a ${...} body that can only have been meant as a plain
// reference: it gets the reference error, which says what to write.
var pathLikeRe = regexp.MustCompile(`^[A-Za-z0-9_.\-]*$`)

// bareRefRe finds a bare reference at the start of a text: refBodyRe
// without its end anchor.
var bareRefRe = regexp.MustCompile(strings.TrimSuffix(refBodyRe.String(), "$"))

// refEnd returns the offset of the "}" that closes the ${ at the start of
// s, or -1. A "}" inside a quoted string of an expression does not close
// it; an unterminated quote falls back to the first "}", whose expression
// then reports the quote.
func refEnd(s string) int {
	for i := 2; i < len(s); i++ {
		switch c := s[i]; c {
		case '}':
			return i
		case '\'', '"', '`':
			j := i + 1
			for ; j < len(s) && s[j] != c; j++ {
				if s[j] == '\\' && c != '`' {
					j++
				}
			}
			if j >= len(s) {
				return strings.IndexByte(s, '}')
			}
			i = j
		}
	}
	return -1
}

// parseSegment parses "${...}": a plain reference, or an expression.
func parseSegment(raw string) (segment, error) {
	body := raw[2 : len(raw)-1]
	if pathLikeRe.MatchString(body) {
		r, err := parseRef(raw)
		if err != nil {
			return segment{}, err
		}
		return segment{ref: &r}, nil
	}
	w, err := compileValueExpr(body)
	if err != nil {
		return segment{}, fmt.Errorf("in %s: %w", truncate(raw), err)
	}
	return segment{expr: w}, nil
}

// value returns what a reference or expression segment stands for. The
// result may share memory with the scope.
func (seg segment) value(sc Scope) (any, error) {
	if seg.expr != nil {
		v, err := seg.expr.evalValue(sc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", seg.source(), err)
		}
		return v, nil
	}
	return sc.lookup(*seg.ref)
}

// source is the segment as written, for messages.
func (seg segment) source() string {
	if seg.expr != nil {
		return truncate("${" + seg.expr.src + "}")
	}
	return seg.ref.String()
}

// exprCache holds compiled expressions by source: a compiled one is never
// modified, and the workflow interpolates the same `with` for every node
// (and every foreach instance), so compiling once keeps its CPU down.
var exprCache = struct {
	sync.Mutex
	m map[string]*When
}{m: map[string]*When{}}

const maxCachedExprs = 4096

func compileValueExpr(body string) (*When, error) {
	exprCache.Lock()
	w := exprCache.m[body]
	exprCache.Unlock()
	if w != nil {
		return w, nil
	}
	w, err := compileWhen(body, whenFuncs(), true)
	if err != nil {
		return nil, err
	}
	exprCache.Lock()
	if len(exprCache.m) >= maxCachedExprs {
		clear(exprCache.m)
	}
	exprCache.m[body] = w
	exprCache.Unlock()
	return w, nil
}

// scanBareRef recognizes a bare reference at src[i:] (an expression's
// params.NAME and the like); raw is empty where there is none.
func scanBareRef(src string, i int) (scannedRef, error) {
	if i > 0 && (isWordByte(src[i-1]) || src[i-1] == '.') {
		return scannedRef{}, nil
	}
	m := bareRefRe.FindString(src[i:])
	if m == "" || i+len(m) < len(src) && isWordByte(src[i+len(m)]) { // "items" is a word
		return scannedRef{}, nil
	}
	r, err := parseRef("${" + m + "}")
	if err != nil {
		return scannedRef{}, err
	}
	return scannedRef{raw: m, pos: i, ref: r}, nil
}
