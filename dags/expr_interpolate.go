package dags

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

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
	literal := -1
	out, err := t.evalSecrets(sc, func(name string, start int) {
		if name == "" {
			if literal < 0 {
				literal = start
			}
			return
		}
		spans = append(spans, SecretSpan{Name: name, Start: start})
	})
	if err == nil && len(spans) > 0 {
		if literal < 0 {
			literal = len(out)
		}
		*secrets = append(*secrets, SecretRef{Path: ptr, Spans: spans, Literal: &literal})
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
