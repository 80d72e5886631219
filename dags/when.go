package dags

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/expr-lang/expr/builtin"
	"github.com/expr-lang/expr/checker"
	"github.com/expr-lang/expr/compiler"
	"github.com/expr-lang/expr/conf"
	"github.com/expr-lang/expr/file"
	exprparser "github.com/expr-lang/expr/parser"
	"github.com/expr-lang/expr/vm"
)

// Limits on a condition. A `when` is text from a spec, and a spec can come
// from anyone who can start a run: expr's parser is recursive, so without
// these a long enough run of "(" would overflow the worker's stack, which
// no recover catches. Real conditions are a line or two.
const (
	maxWhenBytes = 4096 // source length
	maxWhenDepth = 32   // brackets open at once
	maxWhenNodes = 1000 // syntax tree nodes (expr's own budget)
)

// WhenFunc is a function a condition may call. Arguments are evaluated
// values (JSON shapes); an error fails the evaluation.
type WhenFunc func(args ...any) (any, error)

// whenFuncs are the functions conditions and ${...} expressions may call,
// by name. The language grows by adding entries here.
func whenFuncs() map[string]WhenFunc { return dateFuncs() }

// When is a parsed `when` condition, compiled with expr
// (github.com/expr-lang/expr) after references are checked and the
// operators are bound to retrain's rules (see whenBuilder). Evaluating it
// is deterministic (no clock, randomness, goroutines or map order), since
// it runs inside workflow code that Temporal replays.
type When struct {
	src   string
	prog  *vm.Program // nil: the empty condition, always true
	refs  []Ref       // in source order
	value bool        // an expression in a value (valueexpr.go), not a condition

	// Tables the compiled program's internal calls index into.
	args  []Ref      // $ref
	tmpls []template // $tmpl: quoted strings holding references
	texts []string   // $truthy: source of the tested value, for messages
	cmps  []cmpSite  // $cmp
}

// cmpSite is one comparison in a condition.
type cmpSite struct {
	op, src string
}

// ParseWhen parses a condition. A blank condition is always true.
func ParseWhen(src string) (*When, error) {
	return parseWhen(src, whenFuncs())
}

func parseWhen(src string, funcs map[string]WhenFunc) (*When, error) {
	return compileWhen(src, funcs, false)
}

// compileWhen compiles a condition, or with value set an expression in a
// value, whose references are bare and whose result is its value.
func compileWhen(src string, funcs map[string]WhenFunc, value bool) (*When, error) {
	w := &When{src: src, value: value}
	what := "condition"
	if value {
		what = "expression"
	}
	if strings.TrimSpace(src) == "" {
		if value {
			return nil, fmt.Errorf("empty expression")
		}
		return w, nil
	}
	if len(src) > maxWhenBytes {
		return nil, fmt.Errorf("%s is %d bytes long; the limit is %d", what, len(src), maxWhenBytes)
	}
	sc, err := scanWhen(src, value)
	if err != nil {
		return nil, err
	}
	config := whenConfig(w, funcs)
	tree, err := exprparser.ParseWithConfig(sc.text, config)
	if err != nil {
		return nil, sc.syntaxError(err)
	}
	b := &whenBuilder{scan: sc, funcs: funcs, w: w}
	build := b.truthy
	if value {
		build = b.value
	}
	root, _, err := build(tree.Node)
	if err != nil {
		return nil, err
	}
	tree.Node = root
	if _, err := checker.Check(tree, config); err != nil {
		return nil, fmt.Errorf("compiling %s: %w", what, err)
	}
	if w.prog, err = compiler.Compile(tree, config); err != nil {
		return nil, fmt.Errorf("compiling %s: %w", what, err)
	}
	slices.SortStableFunc(b.refs, func(x, y posRef) int { return x.pos - y.pos })
	for _, r := range b.refs {
		w.refs = append(w.refs, r.ref)
	}
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
func (w *When) Refs() []Ref { return slices.Clone(w.refs) }

// Eval evaluates the condition against sc.
func (w *When) Eval(sc Scope) (bool, error) {
	if w.prog == nil {
		return true, nil
	}
	v, err := w.run(sc)
	if err != nil {
		return false, err
	}
	b, ok := v.(bool)
	if !ok { // the root is always a $truthy call
		return false, fmt.Errorf("condition gave %T, not a bool", v)
	}
	return b, nil
}

// evalValue evaluates an expression in a value. The result may share
// memory with the scope.
func (w *When) evalValue(sc Scope) (any, error) {
	if w.prog == nil {
		return nil, fmt.Errorf("empty expression")
	}
	return w.run(sc)
}

func (w *When) run(sc Scope) (any, error) {
	sc = sc.bounded() // a condition alone, or inside an Interpolate it shares (limits.go)
	machine := vm.VM{MemoryBudget: maxExprMemory}
	v, err := machine.Run(w.prog, map[string]any{scopeVar: sc})
	if err != nil {
		// expr wraps what a function returned in its own error with a
		// source snippet; the function's message says it better.
		if inner := errors.Unwrap(err); inner != nil {
			return nil, inner
		}
		return nil, err
	}
	return v, nil
}

// whenScan is a condition prepared for expr. References are not expr
// syntax, so each one outside quotes is blanked to an identifier of the
// same length (padded with a space each side, so that positions in expr's
// errors and tree are positions in the source), and recorded by offset.
// Quoted strings are left alone: references in them are templates, found
// in the tree.
type whenScan struct {
	src   string
	text  string
	refs  map[int]scannedRef // by byte offset of the placeholder identifier
	open  int                // brackets left open at the end
	bytes []int              // byte offset of each rune, when src is not ASCII
	bare  bool               // an expression in a value: references are bare, strings plain
}

type scannedRef struct {
	raw string // as written, "${...}"
	pos int    // byte offset of the "$"
	ref Ref
}

func whenErrorf(pos int, format string, args ...any) error {
	return fmt.Errorf("position %d: %s", pos+1, fmt.Sprintf(format, args...))
}

// scanWhen finds the references, quoted strings and bracket depth in src,
// in one pass that never recurses. With bare set, references are written
// without ${} (an expression inside ${...}).
func scanWhen(src string, bare bool) (*whenScan, error) {
	sc := &whenScan{src: src, refs: map[int]scannedRef{}, bare: bare}
	text := []byte(src)
	depth := 0
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '\'' || c == '"' || c == '`':
			j := i + 1
			for ; j < len(src) && src[j] != c; j++ {
				if src[j] == '\\' && c != '`' {
					j++
				}
			}
			if j >= len(src) {
				return nil, whenErrorf(i, "unterminated string %s", truncate(src[i:]))
			}
			i = j + 1
			continue
		case strings.HasPrefix(src[i:], "${"):
			end := strings.IndexByte(src[i:], '}')
			if end < 0 {
				return nil, whenErrorf(i, "unterminated reference %q; close it with }", truncate(src[i:]))
			}
			raw := src[i : i+end+1]
			r, err := parseRef(raw)
			if err != nil {
				return nil, whenErrorf(i, "%v", err)
			}
			// The shortest reference, ${params.X}, has 11 bytes.
			copy(text[i:], " "+strings.Repeat("r", len(raw)-2)+" ")
			sc.refs[i+1] = scannedRef{raw: raw, pos: i, ref: r}
			i += len(raw)
			continue
		case bare && (c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'):
			r, err := scanBareRef(src, i)
			if err != nil {
				return nil, whenErrorf(i, "%v", err)
			}
			if r.raw == "" {
				break
			}
			copy(text[i:], " "+strings.Repeat("r", len(r.raw)-2)+" ")
			sc.refs[i+1] = r
			i += len(r.raw)
			continue
		case c == '$':
			return nil, whenErrorf(i, "unexpected %q", "$")
		case c == '/': // expr's comments would hide text from this scan
			return nil, whenErrorf(i, "unexpected %q", "/")
		case c == '(' || c == '[' || c == '{':
			if depth++; depth > maxWhenDepth {
				return nil, whenErrorf(i, "brackets nested more than %d deep", maxWhenDepth)
			}
		case c == ')' || c == ']' || c == '}':
			depth--
		}
		i++
	}
	sc.open = depth
	sc.text = string(text)
	for i := 0; i < len(src); i++ {
		if src[i] >= utf8.RuneSelf {
			for b := range src {
				sc.bytes = append(sc.bytes, b)
			}
			break
		}
	}
	return sc, nil
}

// offset turns a rune index from expr into a byte offset in the source.
func (sc *whenScan) offset(runes int) int {
	if sc.bytes == nil {
		return min(max(runes, 0), len(sc.src))
	}
	if runes < 0 {
		return 0
	}
	if runes >= len(sc.bytes) {
		return len(sc.src)
	}
	return sc.bytes[runes]
}

// syntaxError turns expr's parse error into one in this language's terms:
// what was found where, and what to write instead.
func (sc *whenScan) syntaxError(err error) error {
	var fe *file.Error
	if !errors.As(err, &fe) {
		return err
	}
	msg := fe.Message
	if strings.Contains(msg, "maximum allowed nodes") {
		return fmt.Errorf("condition has more than %d parts", maxWhenNodes)
	}
	src := strings.TrimRight(sc.src, " \t\r\n")
	if strings.Contains(msg, "EOF") || strings.Contains(msg, "end of expression") {
		// An unclosed bracket after a complete value wants its ")";
		// anything else (an operator at the end) wants a value.
		if last := src[len(src)-1]; sc.open > 0 && (isWordByte(last) || strings.IndexByte(`)]}'"`+"`", last) >= 0) {
			return whenErrorf(len(sc.src), "expected \")\", found end of condition")
		}
		return whenErrorf(len(sc.src), "expected a value, found end of condition")
	}
	pos := sc.offset(fe.From)
	if strings.HasPrefix(msg, "bad number syntax") || strings.HasPrefix(msg, "invalid integer") ||
		strings.HasPrefix(msg, "invalid float") || pos > 0 && pos < len(sc.src) && sc.src[pos] == '.' && isWordByte(sc.src[pos-1]) {
		for pos > 0 && (isWordByte(sc.src[pos-1]) || sc.src[pos-1] == '.') {
			pos--
		}
		return whenErrorf(pos, "invalid number")
	}
	if pos >= len(sc.src) {
		return whenErrorf(pos, "%s", msg)
	}
	for _, r := range sc.refs { // a placeholder's position is its reference's
		if r.pos <= pos && pos < r.pos+len(r.raw) {
			pos = r.pos
		}
	}
	tok := sc.token(pos)
	switch tok {
	case "=":
		return whenErrorf(pos, "unexpected \"=\"; use == to compare")
	case "&", "|":
		return whenErrorf(pos, "unexpected %q; use && or ||", tok[0])
	}
	if strings.HasPrefix(msg, "invalid char escape") {
		return whenErrorf(pos, "invalid escape in string")
	}
	// An operator where an operand belongs: say what was expected.
	prev := strings.TrimRight(sc.src[:pos], " \t\r\n")
	isOp := slices.Contains([]string{"==", "!=", "<=", ">=", "<", ">", "&&", "||", ")"}, tok)
	if isOp && (prev == "" || strings.IndexByte("=<>!&|(", prev[len(prev)-1]) >= 0) {
		return whenErrorf(pos, "expected a value, found %q", tok)
	}
	return whenErrorf(pos, "unexpected %q", tok)
}

// token returns the token starting at byte offset pos, for messages.
func (sc *whenScan) token(pos int) string {
	for _, r := range sc.refs {
		if r.pos <= pos && pos < r.pos+len(r.raw) {
			return r.raw
		}
	}
	s := sc.src[pos:]
	if s == "" {
		return ""
	}
	if isWordByte(s[0]) {
		n := 1
		for n < len(s) && isWordByte(s[n]) {
			n++
		}
		return s[:n]
	}
	for _, op := range []string{"==", "!=", "<=", ">=", "&&", "||", "??", "?.", "..", "**"} {
		if strings.HasPrefix(s, op) {
			return op
		}
	}
	_, n := utf8.DecodeRuneInString(s)
	return s[:n]
}

func isWordByte(c byte) bool {
	return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// truncate shortens text quoted in a message.
func truncate(s string) string {
	const n = 40
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// whenConfig is the expr configuration of one condition: no builtins, no
// `if` syntax, a node budget, and the internal functions bound to w's
// tables plus funcs. The only variable is the scope, which only the
// internal functions read: conditions cannot reach Go values.
func whenConfig(w *When, funcs map[string]WhenFunc) *conf.Config {
	c := conf.CreateNew()
	for name := range c.Builtins {
		delete(c.Builtins, name)
	}
	c.Optimize = false
	c.MaxNodes = maxWhenNodes
	c.DisableIfOperator = true
	c.Strict = true
	c.WithEnv(map[string]any{scopeVar: Scope{}})
	add := func(name string, fn func(args ...any) (any, error)) {
		c.Functions[name] = &builtin.Function{Name: name, Func: fn}
	}
	add(fnRef, func(args ...any) (any, error) {
		return args[0].(Scope).lookup(w.args[args[1].(int)])
	})
	add(fnTmpl, func(args ...any) (any, error) {
		return w.tmpls[args[1].(int)].eval(args[0].(Scope))
	})
	add(fnTruthy, func(args ...any) (any, error) {
		return truthy(w.texts[args[0].(int)], args[1])
	})
	add(fnCmp, func(args ...any) (any, error) {
		return compare(w.cmps[args[0].(int)], args[1], args[2])
	})
	for name, fn := range funcs {
		// Calls pass the scope first (whenBuilder.call), so that what a
		// function gives is counted against the evaluation's limits
		// before anything uses it (limits.go).
		add(name, func(args ...any) (any, error) {
			v, err := fn(args[1:]...)
			if err != nil {
				return nil, err
			}
			if err := args[0].(Scope).spent(name, v); err != nil {
				return nil, err
			}
			return v, nil
		})
	}
	return c
}
