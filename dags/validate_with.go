package dags

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/retrain-ml/retrain/internal/number"
)

// with checks a node's type and its `with` block against the registry.
func (v *validator) with(n *Node, onFailure bool) {
	w := nodeName(n, onFailure)
	t, ok := v.reg.Lookup(n.Type)
	if !ok {
		pos := n.TypePos
		if pos == (Pos{}) {
			pos = n.Pos
		}
		known := v.reg.Names()
		v.at(pos, "%s: unknown type %q%s; known types: %s", w, n.Type, didYouMean(n.Type, known), listOrNone(known))
		return
	}
	w = fmt.Sprintf("%s (type %s)", w, n.Type)
	v.outputs(n, t, w)
	blockPos := n.WithPos
	if blockPos == (Pos{}) {
		blockPos = n.Pos
	}
	fields := map[string]Field{}
	var names []string
	for _, f := range t.Fields {
		fields[f.Name] = f
		names = append(names, f.Name)
	}
	bad := false
	for _, k := range slices.Sorted(maps.Keys(n.With)) {
		pos := n.WithKeyPos[k]
		if pos == (Pos{}) {
			pos = blockPos
		}
		f, ok := fields[k]
		switch {
		case ok && f.Literal && HasRef(n.With[k]):
			v.at(pos, "%s: with field %q must be written literally in the spec, not computed from a ${...} (a param, another node's output): only the spec's author may set it", w, k)
			bad = true
		case ok:
			if msg := checkField(f.Type, n.With[k]); msg != "" {
				v.at(pos, "%s: with field %q %s", w, k, msg)
				bad = true
			}
		case t.OpenWith:
		case len(names) == 0:
			v.at(pos, "%s: unknown with field %q; type %s takes no with fields", w, k, n.Type)
			bad = true
		default:
			v.at(pos, "%s: unknown with field %q%s; known fields: %s", w, k, didYouMean(k, names), strings.Join(names, ", "))
			bad = true
		}
	}
	for _, f := range t.Fields {
		if _, ok := n.With[f.Name]; f.Required && !ok {
			v.at(blockPos, "%s: missing required with field %q", w, f.Name)
			bad = true
		}
	}
	// References to params whose default is known convert to the field
	// types now, as the run would, so a mismatch is found before it.
	if !bad {
		before := len(v.list)
		checkConversions(&v.errs, n, t.FieldTypes(), v.defaults(), v.outs, blockPos)
		checkNested(&v.errs, n, t.Fields, v.defaults(), v.outs, blockPos)
		checkQueryRefs(&v.errs, n, t.Fields, v.s.paramTypes(), blockPos) // query.go
		bad = len(v.list) > before
	}
	// Check may assume the fields have their declared types, so it only
	// runs on a block that passed the checks above; it sees the params
	// whose defaults are known resolved (validate_check.go).
	if !bad {
		with, used := knownWith(n.With, v.defaults())
		typeCheck(&v.errs, n, t, w, blockPos, with, used, "at their defaults")
		v.metrics(n, t, w, blockPos, with) // validate_metrics.go
	}
}

// checkField checks a `with` value against its field type, returning what
// is wrong or "". A string holding "${" is only known at run time, and so
// passes, as do list items and map values that hold one.
func checkField(ft FieldType, v any) string {
	if _, ok := v.(string); ok && HasRef(v) {
		return "" // lists and maps are checked item by item below
	}
	switch ft {
	case FieldString:
		switch v.(type) {
		case string:
		case bool, int, float64:
			// YAML reads 5 and true as a number and a bool.
			return fmt.Sprintf("must be a string, got %s (quote it: \"%v\")", describeValue(v), v)
		default:
			return "must be a string, got " + describeValue(v)
		}
	case FieldInt:
		if _, ok := toInt64(v); !ok {
			return "must be an integer, got " + describeValue(v)
		}
	case FieldNumber:
		if _, ok := number.Of(v); !ok {
			return "must be a number, got " + describeValue(v)
		}
	case FieldBool:
		if _, ok := v.(bool); !ok {
			return "must be true or false, got " + describeValue(v)
		}
	case FieldDuration:
		s, ok := v.(string)
		if !ok {
			return `must be a duration such as "10m", got ` + describeValue(v)
		}
		if _, err := ParseDuration(s); err != nil {
			return "is not a valid duration: " + err.Error()
		}
	case FieldStringList, FieldIntList:
		list, ok := v.([]any)
		if !ok {
			return "must be a list of " + map[FieldType]string{FieldStringList: "strings", FieldIntList: "integers"}[ft] + ", got " + typeName(v)
		}
		itemType := map[FieldType]FieldType{FieldStringList: FieldString, FieldIntList: FieldInt}[ft]
		for i, item := range list {
			if msg := checkField(itemType, item); msg != "" {
				return fmt.Sprintf("item %d %s", i+1, msg)
			}
		}
	case FieldStringMap:
		m, ok := v.(map[string]any)
		if !ok {
			return "must be a mapping of strings, got " + typeName(v)
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if msg := checkField(FieldString, m[k]); msg != "" {
				return fmt.Sprintf("key %q %s", k, msg)
			}
		}
	}
	return ""
}

// FieldError is an error in one `with` field that a node type's Check
// found: validation reports it at that field's line rather than the
// block's.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// AtField marks err as an error in the `with` field named field (nil
// stays nil).
func AtField(field string, err error) error {
	if err == nil {
		return nil
	}
	return &FieldError{Field: field, Err: err}
}

// checkErrors are the errors a Check returned, errors.Join's one by one.
func checkErrors(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		if e != nil {
			out = append(out, checkErrors(e)...)
		}
	}
	return out
}
