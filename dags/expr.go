package dags

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/retrain-ml/retrain/internal/number"
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
// nodes/progenv).
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
// each secret reference of the template landed. Values substituted for
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

// Interpolate resolves the references in v against sc. It walks maps and
// lists; a string that is exactly one reference becomes the referenced
// value, keeping its type (a list stays a list); a string that mixes text
// and references stays a string, with values formatted as by format.
// "$${" becomes a literal "${". v is not modified; the result shares no
// maps or slices with v or sc.
func Interpolate(v any, sc Scope) (any, error) {
	return interpolate(v, sc, "", "", nil)
}

// InterpolateSecrets is Interpolate that also says where in the result
// the spec's own ${secret.NAME} references are (see SecretRef): the
// worker resolves those and nothing else.
func InterpolateSecrets(v any, sc Scope) (any, []SecretRef, error) {
	var refs []SecretRef
	out, err := interpolate(v, sc, "", "", &refs)
	return out, refs, err
}

// interpolate resolves v, path naming it for messages (env.TOKEN) and ptr
// as a JSON Pointer (/env/TOKEN) for the secret references it records in
// secrets, when that is not nil.
func interpolate(v any, sc Scope, path, ptr string, secrets *[]SecretRef) (any, error) {
	sc = sc.bounded() // limits.go
	switch x := v.(type) {
	case string:
		r, err := interpolateString(x, sc, ptr, secrets)
		if err != nil && path != "" {
			err = fmt.Errorf("%s: %w", path, err)
		}
		return r, err
	case map[string]any:
		out := make(map[string]any, len(x))
		// Sorted keys, so the error reported first is always the same one.
		for _, k := range slices.Sorted(maps.Keys(x)) {
			r, err := interpolate(x[k], sc, joinPath(path, k), ptr+"/"+pointerToken(k), secrets)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case map[string]string:
		m := make(map[string]any, len(x))
		for k, s := range x {
			m[k] = s
		}
		return interpolate(m, sc, path, ptr, secrets)
	case []any:
		out := make([]any, len(x))
		for i, item := range x {
			r, err := interpolate(item, sc, fmt.Sprintf("%s[%d]", path, i), ptr+"/"+strconv.Itoa(i), secrets)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	case []string:
		l := make([]any, len(x))
		for i, s := range x {
			l[i] = s
		}
		return interpolate(l, sc, path, ptr, secrets)
	}
	return v, nil
}

func interpolateString(s string, sc Scope, ptr string, secrets *[]SecretRef) (any, error) {
	sc = sc.bounded() // limits.go
	t, err := parseTemplate(s)
	if err != nil {
		return nil, err
	}
	if len(t) == 1 && (t[0].ref != nil || t[0].expr != nil) {
		v, err := t[0].value(sc)
		if err != nil {
			return nil, err
		}
		if err := sc.resolved(sizeOf(v, MaxResolvedBytes)); err != nil {
			return nil, err
		}
		return deepCopy(v), nil
	}
	if secrets == nil {
		return t.eval(sc)
	}
	var spans []SecretSpan
	out, err := t.evalSecrets(sc, func(name string, start int) {
		spans = append(spans, SecretSpan{Name: name, Start: start})
	})
	if err == nil && len(spans) > 0 {
		*secrets = append(*secrets, SecretRef{Path: ptr, Spans: spans})
	}
	return out, err
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// Refs returns the references in v, walking maps (in key order) and lists.
// It fails on a malformed reference, so validation uses it to check them.
func Refs(v any) ([]Ref, error) {
	var refs []Ref
	err := walkStrings(v, "", func(path, s string) error {
		t, err := parseTemplate(s)
		if err != nil {
			if path != "" {
				return fmt.Errorf("%s: %w", path, err)
			}
			return err
		}
		for _, seg := range t {
			if seg.ref != nil {
				refs = append(refs, *seg.ref)
			}
			if seg.expr != nil {
				refs = append(refs, seg.expr.refs...)
			}
		}
		return nil
	})
	return refs, err
}

// HasRef reports whether v, a `with` value as a spec holds it, has a
// ${...} reference anywhere in it (a string, or a list or map holding one):
// a value known only at run time, which checks made before the run let
// pass. "$${" is an escaped "${", not a reference; a malformed one
// ("${oops") counts, as it was meant as one and Validate reports it.
func HasRef(v any) bool {
	found := errors.New("found")
	return walkStrings(v, "", func(_, s string) error {
		if !strings.Contains(s, "${") {
			return nil
		}
		t, err := parseTemplate(s)
		if err != nil {
			return found
		}
		for _, seg := range t {
			if seg.ref != nil || seg.expr != nil {
				return found
			}
		}
		return nil
	}) != nil
}

// walkStrings calls fn for each string in v, deeply, in a stable order.
func walkStrings(v any, path string, fn func(path, s string) error) error {
	switch x := v.(type) {
	case string:
		return fn(path, x)
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			if err := walkStrings(x[k], joinPath(path, k), fn); err != nil {
				return err
			}
		}
	case map[string]string:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			if err := fn(joinPath(path, k), x[k]); err != nil {
				return err
			}
		}
	case []any:
		for i, item := range x {
			if err := walkStrings(item, fmt.Sprintf("%s[%d]", path, i), fn); err != nil {
				return err
			}
		}
	case []string:
		for i, s := range x {
			if err := fn(fmt.Sprintf("%s[%d]", path, i), s); err != nil {
				return err
			}
		}
	}
	return nil
}

// format turns a value into the text it stands for inside a larger string:
// strings as they are, numbers in their shortest form (5, 0.25), bools as
// true/false, null as nothing, lists and maps as compact JSON.
func format(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case json.Number:
		return x.String(), nil
	}
	if f, ok := number.Of(v); ok {
		if i, ok := toInt64(v); ok {
			return strconv.FormatInt(i, 10), nil
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return "", fmt.Errorf("%v is not a finite number", f)
		}
		return formatFloat(f), nil
	}
	return compactJSON(v)
}

// formatFloat formats like encoding/json: plain digits below 1e21, else
// exponent form; never trailing zeros.
func formatFloat(f float64) string {
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		s := strconv.FormatFloat(f, 'e', -1, 64)
		// Like encoding/json: 1e-07 becomes 1e-7.
		if n := len(s); n >= 4 && s[n-4] == 'e' && s[n-3] == '-' && s[n-2] == '0' {
			s = s[:n-2] + s[n-1:]
		}
		return s
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

func compactJSON(v any) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // a URL in a list must stay readable in argv
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// toInt64 returns v as an int64 if it is a Go integer, or a float with an
// integral value in range.
func toInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint:
		return int64(x), x <= math.MaxInt64
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		return int64(x), x <= math.MaxInt64
	case json.Number:
		i, err := x.Int64()
		if err == nil {
			return i, true
		}
	}
	f, ok := number.Of(v)
	// 2^63 is exactly representable; anything at or above it is out of range.
	if !ok || f != math.Trunc(f) || f < -(1<<63) || f >= 1<<63 {
		return 0, false
	}
	return int64(f), true
}

// deepCopy copies maps and lists so that a value handed out cannot be
// used to modify the one it came from.
func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, item := range x {
			out[k] = deepCopy(item)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, item := range x {
			out[i] = deepCopy(item)
		}
		return out
	case map[string]string:
		out := make(map[string]string, len(x))
		for k, s := range x {
			out[k] = s
		}
		return out
	case []string:
		return slices.Clone(x)
	}
	return v
}
