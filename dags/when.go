package dags

import (
	"cmp"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// When is a parsed `when` condition. Evaluating it is deterministic (no
// clock, randomness or map order), since it runs inside workflow code that
// Temporal replays.
type When struct {
	src  string
	root expr // nil: the empty condition, always true
}

// ParseWhen parses a condition. A blank condition is always true.
func ParseWhen(src string) (*When, error) {
	w := &When{src: src}
	if strings.TrimSpace(src) == "" {
		return w, nil
	}
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &whenParser{src: src, toks: toks}
	root, err := p.or()
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tEOF {
		if t.kind == tCmp {
			return nil, p.errorf(t, "comparisons do not chain; combine them with && or ||")
		}
		return nil, p.errorf(t, "unexpected %s", t.describe())
	}
	w.root = root
	return w, nil
}

// EvalWhen parses and evaluates a condition. A blank one is true.
func EvalWhen(src string, sc Scope) (bool, error) {
	w, err := ParseWhen(src)
	if err != nil {
		return false, err
	}
	return w.Eval(sc)
}

// String returns the condition as written.
func (w *When) String() string { return w.src }

// Refs returns the references in the condition, in source order.
func (w *When) Refs() []Ref {
	var refs []Ref
	if w.root != nil {
		w.root.refs(&refs)
	}
	return refs
}

// Eval evaluates the condition against sc.
func (w *When) Eval(sc Scope) (bool, error) {
	if w.root == nil {
		return true, nil
	}
	return evalBool(w.root, sc)
}

// expr is a node of a condition's syntax tree. eval returns a JSON-shaped
// value: bool, a number, string, nil, []any or map[string]any.
type expr interface {
	eval(sc Scope) (any, error)
	refs(*[]Ref)
	String() string // source text, for messages
}

type (
	orExpr struct {
		src string
		xs  []expr
	}
	andExpr struct {
		src string
		xs  []expr
	}
	notExpr struct {
		src string
		x   expr
	}
	cmpExpr struct {
		src  string
		op   string
		l, r expr
	}
	litExpr struct {
		src string
		v   any
	}
	refExpr struct {
		ref Ref
	}
	strExpr struct { // a quoted string, which may hold references
		src string
		t   template
	}
)

func (e *orExpr) String() string  { return e.src }
func (e *andExpr) String() string { return e.src }
func (e *notExpr) String() string { return e.src }
func (e *cmpExpr) String() string { return e.src }
func (e *litExpr) String() string { return e.src }
func (e *refExpr) String() string { return e.ref.String() }
func (e *strExpr) String() string { return e.src }

func (e *orExpr) refs(r *[]Ref) {
	for _, x := range e.xs {
		x.refs(r)
	}
}

func (e *andExpr) refs(r *[]Ref) {
	for _, x := range e.xs {
		x.refs(r)
	}
}

func (e *notExpr) refs(r *[]Ref) { e.x.refs(r) }
func (e *cmpExpr) refs(r *[]Ref) { e.l.refs(r); e.r.refs(r) }
func (e *litExpr) refs(*[]Ref)   {}
func (e *refExpr) refs(r *[]Ref) { *r = append(*r, e.ref) }

func (e *strExpr) refs(r *[]Ref) {
	for _, seg := range e.t {
		if seg.ref != nil {
			*r = append(*r, *seg.ref)
		}
	}
}

// || and && short-circuit, left to right, like in Go: a reference on the
// right of a decided operator need not resolve.
func (e *orExpr) eval(sc Scope) (any, error) {
	for _, x := range e.xs {
		b, err := evalBool(x, sc)
		if err != nil || b {
			return b, err
		}
	}
	return false, nil
}

func (e *andExpr) eval(sc Scope) (any, error) {
	for _, x := range e.xs {
		b, err := evalBool(x, sc)
		if err != nil || !b {
			return b, err
		}
	}
	return true, nil
}

func (e *notExpr) eval(sc Scope) (any, error) {
	b, err := evalBool(e.x, sc)
	return !b, err
}

func (e *litExpr) eval(Scope) (any, error)    { return e.v, nil }
func (e *refExpr) eval(sc Scope) (any, error) { return sc.lookup(e.ref) }
func (e *strExpr) eval(sc Scope) (any, error) { return e.t.eval(sc) }

func (e *cmpExpr) eval(sc Scope) (any, error) {
	l, err := e.l.eval(sc)
	if err != nil {
		return nil, err
	}
	r, err := e.r.eval(sc)
	if err != nil {
		return nil, err
	}
	return compare(e, l, r)
}

// evalBool evaluates x and applies the truthiness rules: bools as they
// are; the strings "true" and "false" in any case (outputs are often text);
// numbers true unless zero; null false. Anything else is an error rather
// than a guess.
func evalBool(x expr, sc Scope) (bool, error) {
	v, err := x.eval(sc)
	if err != nil {
		return false, err
	}
	switch v := v.(type) {
	case bool:
		return v, nil
	case nil:
		return false, nil
	case string:
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
		return false, fmt.Errorf("%s is %q, which is not true or false", x, v)
	}
	if f, ok := toFloat(v); ok {
		if math.IsNaN(f) {
			return false, fmt.Errorf("%s is NaN, which is not true or false", x)
		}
		return f != 0, nil
	}
	return false, fmt.Errorf("%s is a %s, which is not true or false", x, typeName(v))
}

// compare applies a comparison operator. Numbers compare numerically, also
// against strings that hold a number (outputs such as exit_code may arrive
// as text or as float64); strings lexically; anything else by equality
// only, with values of different types never equal.
func compare(e *cmpExpr, l, r any) (bool, error) {
	lf, lnum := toFloat(l)
	rf, rnum := toFloat(r)
	ls, lstr := l.(string)
	rs, rstr := r.(string)
	if lnum && rstr {
		rf, rnum = numericString(rs)
	} else if rnum && lstr {
		lf, lnum = numericString(ls)
	}
	var c int
	switch {
	case lnum && rnum:
		if math.IsNaN(lf) || math.IsNaN(rf) {
			return false, fmt.Errorf("%s: NaN cannot be compared", e)
		}
		c = cmp.Compare(lf, rf)
	case lstr && rstr:
		c = strings.Compare(ls, rs)
	default:
		switch e.op {
		case "==", "!=":
			eq, err := equal(l, r)
			if err != nil {
				return false, fmt.Errorf("%s: %v", e, err)
			}
			return eq == (e.op == "=="), nil
		}
		return false, fmt.Errorf("%s: cannot order %s and %s", e, describeValue(l), describeValue(r))
	}
	switch e.op {
	case "==":
		return c == 0, nil
	case "!=":
		return c != 0, nil
	case "<":
		return c < 0, nil
	case "<=":
		return c <= 0, nil
	case ">":
		return c > 0, nil
	default: // ">="
		return c >= 0, nil
	}
}

// equal compares values that are not both numbers or both strings. Values
// of different types are not equal; same-typed ones are equal when their
// canonical JSON is (map keys sorted, numbers in shortest form).
func equal(l, r any) (bool, error) {
	if typeName(l) != typeName(r) {
		return false, nil
	}
	lj, err := compactJSON(l)
	if err != nil {
		return false, err
	}
	rj, err := compactJSON(r)
	if err != nil {
		return false, err
	}
	return lj == rj, nil
}

var numericRe = regexp.MustCompile(`^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$`)

// numericString parses a decimal number, ignoring surrounding space (stdout
// ends with a newline). Unlike strconv.ParseFloat it rejects "NaN", "Inf",
// hex and underscores: text that merely could be read as a number.
func numericString(s string) (float64, bool) {
	s = strings.TrimSpace(s)
	if !numericRe.MatchString(s) {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil
}

// typeName names a value's JSON type.
func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "bool"
	case string:
		return "string"
	case []any, []string:
		return "list"
	case map[string]any, map[string]string:
		return "map"
	}
	if _, ok := toFloat(v); ok {
		return "number"
	}
	return fmt.Sprintf("%T", v)
}

func describeValue(v any) string {
	switch v.(type) {
	case nil, []any, []string, map[string]any, map[string]string:
		return typeName(v)
	}
	s, err := format(v)
	if err != nil {
		return typeName(v)
	}
	if _, ok := v.(string); ok {
		s = strconv.Quote(s)
	}
	return typeName(v) + " " + s
}

// Lexer.

type tokKind int

const (
	tEOF tokKind = iota
	tLParen
	tRParen
	tNot
	tAnd
	tOr
	tCmp
	tRef
	tStr
	tLit // number, true, false, null
)

type token struct {
	kind tokKind
	pos  int // byte offset in the source
	text string
	val  any      // tLit
	ref  Ref      // tRef
	tmpl template // tStr
}

func (t token) describe() string {
	if t.kind == tEOF {
		return "end of condition"
	}
	return strconv.Quote(t.text)
}

var numberRe = regexp.MustCompile(`^-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?`)

func isWordByte(c byte) bool {
	return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func lex(src string) ([]token, error) {
	var toks []token
	errAt := func(pos int, format string, args ...any) error {
		return fmt.Errorf("position %d: %s", pos+1, fmt.Sprintf(format, args...))
	}
	for i := 0; i < len(src); {
		c := src[i]
		start := i
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
			continue
		case c == '(':
			toks = append(toks, token{kind: tLParen, pos: i, text: "("})
			i++
		case c == ')':
			toks = append(toks, token{kind: tRParen, pos: i, text: ")"})
			i++
		case strings.HasPrefix(src[i:], "&&"):
			toks = append(toks, token{kind: tAnd, pos: i, text: "&&"})
			i += 2
		case strings.HasPrefix(src[i:], "||"):
			toks = append(toks, token{kind: tOr, pos: i, text: "||"})
			i += 2
		case c == '&' || c == '|':
			return nil, errAt(i, "unexpected %q; use && or ||", c)
		case strings.HasPrefix(src[i:], "=="), strings.HasPrefix(src[i:], "!="),
			strings.HasPrefix(src[i:], "<="), strings.HasPrefix(src[i:], ">="):
			toks = append(toks, token{kind: tCmp, pos: i, text: src[i : i+2]})
			i += 2
		case c == '<' || c == '>':
			toks = append(toks, token{kind: tCmp, pos: i, text: src[i : i+1]})
			i++
		case c == '=':
			return nil, errAt(i, "unexpected \"=\"; use == to compare")
		case c == '!':
			toks = append(toks, token{kind: tNot, pos: i, text: "!"})
			i++
		case strings.HasPrefix(src[i:], "${"):
			end := strings.IndexByte(src[i:], '}')
			if end < 0 {
				return nil, errAt(i, "unterminated reference %q; close it with }", src[i:])
			}
			raw := src[i : i+end+1]
			r, err := parseRef(raw)
			if err != nil {
				return nil, errAt(i, "%v", err)
			}
			toks = append(toks, token{kind: tRef, pos: i, text: raw, ref: r})
			i += end + 1
		case c == '\'' || c == '"':
			var b strings.Builder
			j := i + 1
			for ; j < len(src) && src[j] != c; j++ {
				if src[j] == '\\' && j+1 < len(src) {
					j++
				}
				b.WriteByte(src[j])
			}
			if j >= len(src) {
				return nil, errAt(i, "unterminated string %s", src[i:])
			}
			t, err := parseTemplate(b.String())
			if err != nil {
				return nil, errAt(i, "%v", err)
			}
			i = j + 1
			toks = append(toks, token{kind: tStr, pos: start, text: src[start:i], tmpl: t})
		case c == '-' || '0' <= c && c <= '9':
			m := numberRe.FindString(src[i:])
			if m == "" || i+len(m) < len(src) && (isWordByte(src[i+len(m)]) || src[i+len(m)] == '.') {
				return nil, errAt(i, "invalid number")
			}
			f, err := strconv.ParseFloat(m, 64)
			if err != nil {
				return nil, errAt(i, "invalid number %s", m)
			}
			toks = append(toks, token{kind: tLit, pos: i, text: m, val: f})
			i += len(m)
		case isWordByte(c):
			j := i
			for j < len(src) && isWordByte(src[j]) {
				j++
			}
			w := src[i:j]
			var v any
			switch w {
			case "true":
				v = true
			case "false":
				v = false
			case "null":
				v = nil
			case "and", "or", "not":
				return nil, errAt(i, "unknown word %q; use &&, || and !", w)
			default:
				return nil, errAt(i, "unknown word %q; quote strings, and write references as ${params.NAME} or ${nodes.ID.outputs.KEY}", w)
			}
			toks = append(toks, token{kind: tLit, pos: i, text: w, val: v})
			i = j
		default:
			return nil, errAt(i, "unexpected %q", src[i:i+1])
		}
	}
	return append(toks, token{kind: tEOF, pos: len(src)}), nil
}

// Parser.

type whenParser struct {
	src  string
	toks []token
	i    int
}

func (p *whenParser) peek() token { return p.toks[p.i] }

func (p *whenParser) next() token {
	t := p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

func (p *whenParser) errorf(t token, format string, args ...any) error {
	return fmt.Errorf("position %d: %s", t.pos+1, fmt.Sprintf(format, args...))
}

// text returns the source from token index from up to the current one.
func (p *whenParser) text(from int) string {
	end := len(p.src)
	if p.i < len(p.toks) {
		end = p.toks[p.i].pos
	}
	return strings.TrimSpace(p.src[p.toks[from].pos:end])
}

func (p *whenParser) or() (expr, error) {
	start := p.i
	x, err := p.and()
	if err != nil {
		return nil, err
	}
	xs := []expr{x}
	for p.peek().kind == tOr {
		p.next()
		y, err := p.and()
		if err != nil {
			return nil, err
		}
		xs = append(xs, y)
	}
	if len(xs) == 1 {
		return x, nil
	}
	return &orExpr{src: p.text(start), xs: xs}, nil
}

func (p *whenParser) and() (expr, error) {
	start := p.i
	x, err := p.not()
	if err != nil {
		return nil, err
	}
	xs := []expr{x}
	for p.peek().kind == tAnd {
		p.next()
		y, err := p.not()
		if err != nil {
			return nil, err
		}
		xs = append(xs, y)
	}
	if len(xs) == 1 {
		return x, nil
	}
	return &andExpr{src: p.text(start), xs: xs}, nil
}

func (p *whenParser) not() (expr, error) {
	if p.peek().kind != tNot {
		return p.cmp()
	}
	start := p.i
	p.next()
	x, err := p.not()
	if err != nil {
		return nil, err
	}
	return &notExpr{src: p.text(start), x: x}, nil
}

func (p *whenParser) cmp() (expr, error) {
	start := p.i
	l, err := p.operand()
	if err != nil {
		return nil, err
	}
	if p.peek().kind != tCmp {
		return l, nil
	}
	op := p.next().text
	r, err := p.operand()
	if err != nil {
		return nil, err
	}
	return &cmpExpr{src: p.text(start), op: op, l: l, r: r}, nil
}

func (p *whenParser) operand() (expr, error) {
	t := p.next()
	switch t.kind {
	case tLParen:
		x, err := p.or()
		if err != nil {
			return nil, err
		}
		if c := p.next(); c.kind != tRParen {
			return nil, p.errorf(c, "expected \")\", found %s", c.describe())
		}
		return x, nil
	case tRef:
		return &refExpr{ref: t.ref}, nil
	case tStr:
		return &strExpr{src: t.text, t: t.tmpl}, nil
	case tLit:
		return &litExpr{src: t.text, v: t.val}, nil
	}
	return nil, p.errorf(t, "expected a value, found %s", t.describe())
}
