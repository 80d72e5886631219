package dags

import (
	"strings"

	"github.com/expr-lang/expr/ast"
)

// Names of the internal functions and variable a condition compiles to.
// Outside references a condition cannot contain "$", so none can name them.
const (
	scopeVar = "$scope"
	fnRef    = "$ref"    // $ref(scope, i): the value of When.args[i]
	fnTmpl   = "$tmpl"   // $tmpl(scope, i): When.tmpls[i] interpolated
	fnTruthy = "$truthy" // $truthy(i, v): v as a bool, by truthiness rules
	fnCmp    = "$cmp"    // $cmp(i, l, r): comparison When.cmps[i]
)

// whenBuilder checks expr's syntax tree of a condition against this
// language and rewrites it: references and quoted templates become calls
// that read the scope, comparisons become $cmp (numeric strings compare as
// numbers, types never coerce), and every operand of &&, || and ! goes
// through $truthy. Anything else expr can parse (member access,
// arithmetic, literals of lists and maps, closures, unknown names or
// functions) is refused here, so the language is exactly what retrain
// documents plus the functions in whenFuncs. The tree is at most
// maxWhenNodes nodes and maxWhenDepth brackets deep, so recursion here is
// bounded.
type whenBuilder struct {
	scan  *whenScan
	funcs map[string]WhenFunc
	w     *When
	refs  []posRef
}

type posRef struct {
	pos int
	ref Ref
}

// span is a byte range of the source.
type span struct{ from, to int }

func (b *whenBuilder) loc(n ast.Node) span {
	l := n.Location()
	return span{b.scan.offset(l.From), b.scan.offset(l.To)}
}

func (b *whenBuilder) text(s span) string {
	return strings.TrimSpace(b.scan.src[s.from:s.to])
}

// ref returns the reference a placeholder identifier stands for.
func (b *whenBuilder) ref(n ast.Node) (scannedRef, bool) {
	id, ok := n.(*ast.IdentifierNode)
	if !ok {
		return scannedRef{}, false
	}
	r, ok := b.scan.refs[b.loc(id).from]
	return r, ok && len(id.Value) == len(r.raw)-2
}

// extent is the source range of an unrewritten subtree, without the
// brackets around it.
func (b *whenBuilder) extent(n ast.Node) span {
	if r, ok := b.ref(n); ok {
		return span{r.pos, r.pos + len(r.raw)}
	}
	s := b.loc(n)
	switch n := n.(type) {
	case *ast.UnaryNode:
		s.to = max(s.to, b.extent(n.Node).to)
	case *ast.BinaryNode:
		l, r := b.extent(n.Left), b.extent(n.Right)
		s = span{min(s.from, l.from), max(s.to, r.to)}
	}
	return s
}

// parenthesized reports whether the source range is inside brackets of
// its own.
func (b *whenBuilder) parenthesized(s span) bool {
	before := strings.TrimRight(b.scan.src[:s.from], " \t\r\n")
	after := strings.TrimLeft(b.scan.src[s.to:], " \t\r\n")
	return strings.HasSuffix(before, "(") && strings.HasPrefix(after, ")")
}

func call(name string, args ...ast.Node) ast.Node {
	return &ast.CallNode{Callee: &ast.IdentifierNode{Value: name}, Arguments: args}
}

func scopeArg() ast.Node    { return &ast.IdentifierNode{Value: scopeVar} }
func intArg(i int) ast.Node { return &ast.IntegerNode{Value: i} }
func isComparison(op string) bool {
	switch op {
	case "==", "!=", "<", "<=", ">", ">=":
		return true
	}
	return false
}

// givesBool reports whether a rewritten node always gives a bool.
func givesBool(n ast.Node) bool {
	switch n := n.(type) {
	case *ast.BoolNode:
		return true
	case *ast.UnaryNode:
		return n.Operator == "!"
	case *ast.BinaryNode:
		return n.Operator == "&&" || n.Operator == "||"
	case *ast.CallNode:
		id, ok := n.Callee.(*ast.IdentifierNode)
		return ok && (id.Value == fnCmp || id.Value == fnTruthy)
	}
	return false
}

// truthy rewrites n as a value tested for truth.
func (b *whenBuilder) truthy(n ast.Node) (ast.Node, span, error) {
	x, s, err := b.value(n)
	if err != nil || givesBool(x) {
		return x, s, err
	}
	b.w.texts = append(b.w.texts, b.text(s))
	return call(fnTruthy, intArg(len(b.w.texts)-1), x), s, nil
}

const (
	unknownWord     = "unknown word %q; quote strings, and write references as ${params.NAME} or ${nodes.ID.outputs.KEY}"
	unknownBareWord = "unknown word %q; quote strings, and write references as params.NAME, nodes.ID.outputs.KEY or run.NAME"
)

// value rewrites n as a value. It returns the source range of n.
func (b *whenBuilder) value(n ast.Node) (ast.Node, span, error) {
	s := b.loc(n)
	if r, ok := b.ref(n); ok {
		b.refs = append(b.refs, posRef{r.pos, r.ref})
		b.w.args = append(b.w.args, r.ref)
		return call(fnRef, scopeArg(), intArg(len(b.w.args)-1)), span{r.pos, r.pos + len(r.raw)}, nil
	}
	switch n := n.(type) {
	case *ast.BoolNode, *ast.IntegerNode, *ast.FloatNode:
		return n, s, nil
	case *ast.IdentifierNode:
		if n.Value == "null" {
			return &ast.NilNode{}, s, nil
		}
		if b.scan.bare {
			return nil, s, whenErrorf(s.from, unknownBareWord, n.Value)
		}
		return nil, s, whenErrorf(s.from, unknownWord, n.Value)
	case *ast.NilNode: // expr's "nil"; this language says null
		return nil, s, whenErrorf(s.from, unknownWord, b.text(s))
	case *ast.StringNode:
		return b.str(n, s)
	case *ast.UnaryNode:
		return b.unary(n, s)
	case *ast.BinaryNode:
		return b.binary(n, s)
	case *ast.CallNode:
		return b.call(n, s)
	case *ast.BuiltinNode: // expr's builtins are not this language's
		return nil, s, whenErrorf(s.from, "unknown function %q", n.Name)
	case *ast.MemberNode:
		if _, _, err := b.value(n.Node); err != nil {
			return nil, s, err
		}
		at := b.extent(n.Node).to
		at += len(b.scan.src[at:]) - len(strings.TrimLeft(b.scan.src[at:], " \t\r\n"))
		return nil, s, whenErrorf(at, "unexpected %q", b.scan.token(at))
	}
	return nil, s, whenErrorf(s.from, "unexpected %q", b.scan.token(s.from))
}

// str rewrites a quoted string, which may hold references.
func (b *whenBuilder) str(n *ast.StringNode, s span) (ast.Node, span, error) {
	if b.scan.bare { // plain text: expressions do not nest
		return n, s, nil
	}
	t, err := parseTemplate(n.Value)
	if err != nil {
		return nil, s, whenErrorf(s.from, "%v", err)
	}
	var lit strings.Builder
	refs := 0
	for i, seg := range t {
		if seg.ref != nil {
			// Order among the condition's references: i is below the
			// string's length, so this stays inside its source range.
			b.refs = append(b.refs, posRef{s.from + i, *seg.ref})
			refs++
		}
		if seg.expr != nil {
			for _, r := range seg.expr.refs {
				b.refs = append(b.refs, posRef{s.from + i, r})
			}
			refs++
		}
		lit.WriteString(seg.lit)
	}
	if refs == 0 { // "$${" is a literal "${" even without references
		return &ast.StringNode{Value: lit.String()}, s, nil
	}
	b.w.tmpls = append(b.w.tmpls, t)
	return call(fnTmpl, scopeArg(), intArg(len(b.w.tmpls)-1)), s, nil
}

func (b *whenBuilder) unary(n *ast.UnaryNode, s span) (ast.Node, span, error) {
	switch n.Operator {
	case "!":
		x, xs, err := b.truthy(n.Node)
		return &ast.UnaryNode{Operator: "!", Node: x}, span{s.from, xs.to}, err
	case "-", "+": // a signed number literal
		sign := 1
		if n.Operator == "-" {
			sign = -1
		}
		xs := b.extent(n.Node)
		switch x := n.Node.(type) {
		case *ast.IntegerNode:
			return &ast.IntegerNode{Value: sign * x.Value}, span{s.from, xs.to}, nil
		case *ast.FloatNode:
			return &ast.FloatNode{Value: float64(sign) * x.Value}, span{s.from, xs.to}, nil
		}
	case "not":
		return nil, s, whenErrorf(s.from, "unknown word %q; use &&, || and !", n.Operator)
	}
	return nil, s, whenErrorf(s.from, "unexpected %q", n.Operator)
}

func (b *whenBuilder) binary(n *ast.BinaryNode, s span) (ast.Node, span, error) {
	switch op := n.Operator; {
	case op == "&&" || op == "||":
		l, ls, err := b.truthy(n.Left)
		if err != nil {
			return nil, ls, err
		}
		r, rs, err := b.truthy(n.Right)
		if err != nil {
			return nil, rs, err
		}
		return &ast.BinaryNode{Operator: op, Left: l, Right: r}, span{ls.from, rs.to}, nil
	case isComparison(op):
		return b.comparison(n, s)
	case op == "and" || op == "or":
		return nil, s, whenErrorf(s.from, "unknown word %q; use &&, || and !", op)
	}
	// Report the operands' problems first: in `a + 1` the unknown word
	// matters more than the operator.
	if _, _, err := b.value(n.Left); err != nil {
		return nil, s, err
	}
	return nil, s, whenErrorf(s.from, "unexpected %q", n.Operator)
}

// comparison rewrites l OP r as $cmp. "!" binds looser than comparisons
// here (`!a < b` is `!(a < b)`), as it did before this language ran on
// expr, where it binds tighter: unbracketed "!"s on the left move out.
func (b *whenBuilder) comparison(n *ast.BinaryNode, s span) (ast.Node, span, error) {
	left, nots := n.Left, 0
	for {
		u, ok := left.(*ast.UnaryNode)
		if !ok || u.Operator != "!" || b.parenthesized(b.extent(u)) {
			break
		}
		left, nots = u.Node, nots+1
	}
	for _, side := range []ast.Node{left, n.Right} {
		if x, ok := side.(*ast.BinaryNode); ok && isComparison(x.Operator) && !b.parenthesized(b.extent(x)) {
			return nil, s, whenErrorf(s.from, "comparisons do not chain; combine them with && or ||")
		}
	}
	l, ls, err := b.value(left)
	if err != nil {
		return nil, ls, err
	}
	r, rs, err := b.value(n.Right)
	if err != nil {
		return nil, rs, err
	}
	whole := span{ls.from, rs.to}
	b.w.cmps = append(b.w.cmps, cmpSite{op: n.Operator, src: b.text(whole)})
	x := call(fnCmp, intArg(len(b.w.cmps)-1), l, r)
	for ; nots > 0; nots-- {
		x = &ast.UnaryNode{Operator: "!", Node: x}
	}
	return x, b.extent(n), nil
}

// call rewrites a call of a function in whenFuncs.
func (b *whenBuilder) call(n *ast.CallNode, s span) (ast.Node, span, error) {
	id, ok := n.Callee.(*ast.IdentifierNode)
	if _, isRef := b.ref(n.Callee); !ok || isRef {
		at := b.extent(n.Callee).to
		return nil, s, whenErrorf(at, "unexpected %q", b.scan.token(at))
	}
	if b.funcs[id.Value] == nil {
		return nil, s, whenErrorf(s.from, "unknown function %q", id.Value)
	}
	// The scope goes first: the call counts its result against the
	// evaluation's limits (whenConfig, limits.go).
	args := make([]ast.Node, len(n.Arguments)+1)
	args[0] = scopeArg()
	end := s.to
	for i, a := range n.Arguments {
		x, as, err := b.value(a)
		if err != nil {
			return nil, as, err
		}
		args[i+1], end = x, max(end, as.to)
	}
	if j := strings.IndexByte(b.scan.src[end:], ')'); j >= 0 {
		end += j + 1
	}
	return &ast.CallNode{Callee: &ast.IdentifierNode{Value: id.Value}, Arguments: args}, span{s.from, end}, nil
}
