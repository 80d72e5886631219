package dags

import (
	"fmt"
	"regexp"
	"strings"
)

// Ref is a reference in a spec value: ${params.NAME},
// ${nodes.ID.outputs.KEY}, ${run.NAME}, or one inside a ${...} expression.
type Ref struct {
	Kind string // "params", "nodes", "run" (runvalues.go) or "item" (foreach.go)
	Name string // param name or node id; for "item", "item" or "item_index"
	Key  string // output key; nodes only. For "item", a key of the item (${item.KEY})
}

// String returns the reference as written in a spec.
func (r Ref) String() string {
	if r.Kind == "nodes" {
		return "${nodes." + r.Name + ".outputs." + r.Key + "}"
	}
	if r.Kind == "item" {
		return itemRefString(r) // foreach.go
	}
	return "${" + r.Kind + "." + r.Name + "}"
}

// Scope is what references resolve against at run time.
type Scope struct {
	Params  map[string]any
	Outputs map[string]map[string]any // by node id
	Item    *Item                     // the foreach instance being run (foreach.go); nil outside one
	Run     *RunValues                // ${run.NAME} (runvalues.go); nil where the run is not known

	budget *evalBudget // what this evaluation produced so far (limits.go); never serialized
}

// lookup returns the value a reference names. The result may share memory
// with the scope; callers that hand it out copy it.
func (sc Scope) lookup(r Ref) (any, error) {
	switch r.Kind {
	case "params":
		v, ok := sc.Params[r.Name]
		if !ok {
			return nil, fmt.Errorf("%s: no param %q", r, r.Name)
		}
		return v, nil
	case "nodes":
		out, ok := sc.Outputs[r.Name]
		if !ok {
			return nil, fmt.Errorf("%s: no outputs from node %q (did it run?)", r, r.Name)
		}
		v, ok := out[r.Key]
		if !ok {
			return nil, fmt.Errorf("%s: node %q has no output %q", r, r.Name, r.Key)
		}
		return v, nil
	case "item":
		return sc.Item.lookup(r) // foreach.go
	case "run":
		return sc.Run.lookup(r) // runvalues.go
	}
	return nil, fmt.Errorf("%s: unknown reference kind %q", r, r.Kind)
}

// segment is a piece of a template string: literal text or a reference.
type segment struct {
	lit  string
	ref  *Ref
	expr *When // an expression: ${...} that is not a plain reference (valueexpr.go)
	// secret names the secret of a ${secret.NAME} the spec's author wrote
	// here; lit holds the reference's text, which is what the workflow
	// passes on (secretrefs.go says where, for the worker to resolve).
	secret string
}

// template is a string split into literal text and references.
type template []segment

var refBodyRe = regexp.MustCompile(`^(?:params\.([A-Za-z_][A-Za-z0-9_-]*)|nodes\.([A-Za-z][A-Za-z0-9_-]*)\.outputs\.([A-Za-z_][A-Za-z0-9_-]*)|(item_index|item)(?:\.([A-Za-z_][A-Za-z0-9_-]*))?|run\.([A-Za-z_][A-Za-z0-9_]*))$`)

// secretRefRe matches a secret reference, ${secret.NAME}: text the
// workflow passes through unchanged for the worker to resolve (see
// activities/progenv).
var secretRefRe = regexp.MustCompile(`^\$\{secret\.[A-Za-z0-9_]+\}$`)

// parseTemplate splits s into text and references. "$${" is a literal "${".
func parseTemplate(s string) (template, error) {
	var t template
	var lit strings.Builder
	exprs := 0 // expressions so far, each compiled: at most maxTemplateExprs (limits.go)
	for i := 0; i < len(s); {
		j := strings.IndexByte(s[i:], '$')
		if j < 0 {
			lit.WriteString(s[i:])
			break
		}
		lit.WriteString(s[i : i+j])
		i += j
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			lit.WriteString("${")
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			end := refEnd(s[i:]) // valueexpr.go
			if end < 0 {
				return nil, fmt.Errorf("unterminated reference %q; close it with }", truncate(s[i:]))
			}
			raw := s[i : i+end+1]
			if secretRefRe.MatchString(raw) {
				// ${secret.NAME} is resolved by the worker when the step
				// runs, never in the workflow: it stays literal text here
				// so its value cannot reach workflow history. It is a
				// segment of its own so that interpolation can say where
				// it is (secretrefs.go): only a reference written here is
				// ever resolved, never one that arrives inside a value.
				if lit.Len() > 0 {
					t = append(t, segment{lit: lit.String()})
					lit.Reset()
				}
				t = append(t, segment{lit: raw, secret: raw[len("${secret.") : len(raw)-1]})
				i += end + 1
				continue
			}
			seg, err := parseSegment(raw) // valueexpr.go
			if err != nil {
				return nil, err
			}
			if exprs += btoi(seg.expr != nil); exprs > maxTemplateExprs {
				return nil, fmt.Errorf("more than %d ${...} expressions in one value", maxTemplateExprs)
			}
			if lit.Len() > 0 {
				t = append(t, segment{lit: lit.String()})
				lit.Reset()
			}
			t = append(t, seg)
			i += end + 1
		default:
			lit.WriteByte('$')
			i++
		}
	}
	if lit.Len() > 0 {
		t = append(t, segment{lit: lit.String()})
	}
	return t, nil
}

// parseRef parses "${...}".
func parseRef(raw string) (Ref, error) {
	m := refBodyRe.FindStringSubmatch(raw[2 : len(raw)-1])
	switch {
	case m == nil:
		return Ref{}, fmt.Errorf("unknown reference %q; use ${params.NAME} or ${nodes.ID.outputs.KEY}", raw)
	case m[1] != "":
		return Ref{Kind: "params", Name: m[1]}, nil
	case m[4] != "":
		return itemRef(raw, m[4], m[5]) // foreach.go
	case m[6] != "":
		return Ref{Kind: "run", Name: m[6]}, nil
	default:
		return Ref{Kind: "nodes", Name: m[2], Key: m[3]}, nil
	}
}

// single reports whether the template is exactly one reference, which
// interpolates to the referenced value with its type.
func (t template) single() *Ref {
	if len(t) == 1 && t[0].ref != nil {
		return t[0].ref
	}
	return nil
}

// eval interpolates the template into a string.
func (t template) eval(sc Scope) (string, error) {
	return t.evalSecrets(sc, nil)
}

// evalSecrets is eval that also reports, to found, where in the result
// each secret reference of the template landed, and (with name "") where
// each value substituted for a reference begins. Values substituted for
// references are never searched: a "${secret.X}" inside one is text.
func (t template) evalSecrets(sc Scope, found func(name string, start int)) (string, error) {
	var b strings.Builder
	for _, seg := range t {
		if seg.ref == nil && seg.expr == nil {
			if seg.secret != "" && found != nil {
				found(seg.secret, b.Len())
			}
			if err := sc.resolved(len(seg.lit)); err != nil { // limits.go
				return "", err
			}
			b.WriteString(seg.lit)
			continue
		}
		v, err := seg.value(sc)
		if err != nil {
			return "", err
		}
		if found != nil {
			found("", b.Len())
		}
		// Sized before format builds it, counted before it is written.
		if err := sc.grow(b.Len(), sizeOf(v, MaxValueBytes)); err != nil {
			return "", fmt.Errorf("%s: %w", seg.source(), err)
		}
		s, err := format(v)
		if err != nil {
			return "", fmt.Errorf("%s: %v", seg.source(), err)
		}
		b.WriteString(s)
	}
	return b.String(), nil
}
