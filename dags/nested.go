package dags

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Nested types a value inside a free-form (FieldAny) `with` field: a gate's
// thresholds, a map of metric name to number. Path is dot-separated keys
// below the field, where * matches any key of a map (or any item of a
// list): "*.min" is the min of every metric. A node type declares them so
// that a reference there is type-checked before the run, as a top-level
// field's is: `min: "${params.model}"` with a string default is an error
// at validation, not a failed gate after training.
type Nested struct {
	Path string
	Type FieldType
}

// ParseNested reads a nested tag: comma-separated PATH:TYPE pairs, as in
// "*.min:number,*.direction:string".
func ParseNested(tag string) ([]Nested, error) {
	var out []Nested
	for item := range strings.SplitSeq(tag, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		path, t, ok := strings.Cut(item, ":")
		if !ok || path == "" || t == "" {
			return nil, fmt.Errorf("nested %q: want PATH:TYPE", item)
		}
		switch ft := FieldType(t); ft {
		case FieldString, FieldInt, FieldNumber, FieldBool, FieldDuration, FieldQuery:
			out = append(out, Nested{Path: path, Type: ft})
		default:
			return nil, fmt.Errorf("nested %q: type %q is not a scalar field type", item, t)
		}
	}
	return out, nil
}

// checkNested reports each value at a Nested path of n's fields whose
// statically known value (a literal, or a reference to a param with a
// known default or to a declared output) does not convert to its type.
func checkNested(e *errs, n *Node, fields []Field, known map[string]any, outs map[string]map[string]ParamType, blockPos Pos) {
	for _, f := range fields {
		raw, ok := n.With[f.Name]
		if !ok || len(f.Nested) == 0 {
			continue
		}
		static := staticWith(raw, known, outs)
		pos := n.WithKeyPos[f.Name]
		if pos == (Pos{}) {
			pos = blockPos
		}
		for _, nt := range f.Nested {
			if nt.Type == FieldQuery {
				continue // checkQueryRefs (query.go)
			}
			walkNested(raw, static, strings.Split(nt.Path, "."), "with."+f.Name, func(path string, raw, v any) {
				if msg := nestedProblem(nt.Type, raw, v, path); msg != "" {
					e.at(pos, "node %s: %s", n.ID, msg)
				}
			})
		}
	}
}

// walkNested calls fn for each value of raw (and its statically resolved
// form static) at the path segs, naming it by its full path.
func walkNested(raw, static any, segs []string, path string, fn func(path string, raw, v any)) {
	if len(segs) == 0 {
		fn(path, raw, static)
		return
	}
	seg, rest := segs[0], segs[1:]
	switch r := raw.(type) {
	case map[string]any:
		s, _ := static.(map[string]any)
		keys := []string{seg}
		if seg == "*" {
			keys = slices.Sorted(maps.Keys(r))
		}
		for _, k := range keys {
			if item, ok := r[k]; ok {
				walkNested(item, s[k], rest, path+"."+k, fn)
			}
		}
	case []any:
		if seg != "*" {
			return
		}
		s, _ := static.([]any)
		for i, item := range r {
			var sv any
			if i < len(s) {
				sv = s[i]
			}
			walkNested(item, sv, rest, fmt.Sprintf("%s[%d]", path, i), fn)
		}
	}
	// A reference standing for the whole map (or anything else) is only
	// known at run time; the node checks it then.
}

// nestedProblem says what is wrong with v, the static form of raw, as a
// value of type ft at path, or "".
func nestedProblem(ft FieldType, raw, v any, path string) string {
	if s, ok := raw.(string); ok && HasRef(s) {
		if _, err := convertValue(ft, v, path, s); err != nil {
			return err.Error()
		}
		return ""
	}
	if raw == nil {
		return "" // null: the node's own rules say whether that is allowed
	}
	if _, ok := convert(ft, raw); !ok {
		return fmt.Sprintf("%s: %s, want %s", path, outputForMessage(raw), ft)
	}
	return ""
}
