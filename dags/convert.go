package dags

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/retrain-ml/retrain/internal/number"
)

// ConvertWith converts the referenced values of a node's resolved `with`
// block to the types its fields declare. A whole-string reference keeps its
// value's type when interpolated; the activity then decodes `with` into Go
// fields, where a number in a string field (an argv item) or "5" in an int
// field fails. Only unambiguous conversions are made: a number or bool into
// a string field is formatted, a numeric string into an int or number field
// is parsed (an int field refuses 1.5 and "1.5"), lists and string maps are
// converted item by item. Anything else is an error naming the field, the
// reference as written, the value's type and the wanted type.
//
// raw is the block as the spec holds it and resolved the same block after
// Interpolate. Only values that hold a reference in raw are converted:
// literals were checked by Validate and are left as they are. A field not in
// fields (an OpenWith key, a FieldAny) is left as it is. The result shares
// no maps or lists with resolved that it changed; ConvertWith is pure, so
// workflow code may call it.
func ConvertWith(fields map[string]FieldType, raw, resolved map[string]any) (map[string]any, error) {
	if len(fields) == 0 || len(resolved) == 0 {
		return resolved, nil
	}
	out := maps.Clone(resolved)
	for _, k := range slices.Sorted(maps.Keys(resolved)) {
		ft, ok := fields[k]
		if !ok || ft == FieldAny || !HasRef(raw[k]) {
			continue
		}
		v, err := convertField(ft, raw[k], resolved[k], "with."+k)
		if err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, nil
}

// unknown stands for a value only the run can know (a node's output) in a
// block resolved before the run; conversion lets it pass.
type unknown struct{}

// convertField converts v, the resolved form of raw, to ft. path names the
// place in messages (with.argv[1]).
func convertField(ft FieldType, raw, v any, path string) (any, error) {
	if _, ok := v.(unknown); ok {
		return v, nil
	}
	if s, ok := raw.(string); ok {
		// A reference, or text around references: the value came from s.
		return convertValue(ft, v, path, s)
	}
	// A list or map written in the spec with references among its items:
	// convert item by item, each named by its own text.
	elem, ok := map[FieldType]FieldType{FieldStringList: FieldString, FieldIntList: FieldInt, FieldStringMap: FieldString}[ft]
	if !ok {
		return v, nil // Validate reported a literal of the wrong shape
	}
	switch r := raw.(type) {
	case []any:
		l, ok := v.([]any)
		if !ok || len(l) != len(r) {
			return v, nil
		}
		out := make([]any, len(l))
		for i := range l {
			c, err := convertItem(elem, r[i], l[i], fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	case map[string]any:
		m, ok := v.(map[string]any)
		if !ok {
			return v, nil
		}
		out := make(map[string]any, len(m))
		for _, k := range slices.Sorted(maps.Keys(m)) {
			c, err := convertItem(elem, r[k], m[k], path+"."+k)
			if err != nil {
				return nil, err
			}
			out[k] = c
		}
		return out, nil
	}
	return v, nil
}

// convertItem converts one item of a list or map written in the spec: only
// items that hold a reference; literal items were checked by Validate.
func convertItem(ft FieldType, raw, v any, path string) (any, error) {
	if !HasRef(raw) {
		return v, nil
	}
	return convertField(ft, raw, v, path)
}

// convertValue converts a value that came from the spec text ref.
func convertValue(ft FieldType, v any, path, ref string) (any, error) {
	switch x := v.(type) {
	case unknown:
		return v, nil
	case declared:
		if !declaredFits(ft, x.t) {
			return nil, fmt.Errorf("%s: %s is declared as %s, want %s", path, ref, x.t, ft)
		}
		return v, nil
	}
	c, ok := convert(ft, v)
	if !ok {
		return nil, fmt.Errorf("%s: %s is a %s, want %s", path, ref, valueForMessage(v), ft)
	}
	return c, nil
}

// convert converts v to ft where that is unambiguous. A list converts when
// each of its items does; an item that is still unknown passes.
func convert(ft FieldType, v any) (any, bool) {
	if v == nil {
		return nil, true // as before: decoding null leaves the field's zero value
	}
	switch ft {
	case FieldString, FieldDuration:
		switch x := v.(type) {
		case string:
			return x, true
		case bool:
			return strconv.FormatBool(x), ft == FieldString
		}
		if _, ok := number.Of(v); ok && ft == FieldString {
			s, err := format(v)
			return s, err == nil
		}
	case FieldInt:
		if s, ok := v.(string); ok {
			i, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
			return i, err == nil
		}
		if _, isBool := v.(bool); !isBool {
			return toInt64(v)
		}
	case FieldNumber:
		if s, ok := v.(string); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			return f, err == nil && !math.IsInf(f, 0) && !math.IsNaN(f)
		}
		if _, isBool := v.(bool); !isBool {
			if f, ok := number.Of(v); ok && !math.IsInf(f, 0) && !math.IsNaN(f) {
				return v, true
			}
		}
	case FieldBool:
		_, ok := v.(bool)
		return v, ok
	case FieldStringList, FieldIntList:
		elem := map[FieldType]FieldType{FieldStringList: FieldString, FieldIntList: FieldInt}[ft]
		var items []any
		switch x := v.(type) {
		case []any:
			items = x
		case []string:
			for _, s := range x {
				items = append(items, s)
			}
		default:
			return nil, false
		}
		out := make([]any, len(items))
		for i, item := range items {
			c, ok := convertOrUnknown(elem, item)
			if !ok {
				return nil, false
			}
			out[i] = c
		}
		return out, true
	case FieldStringMap:
		switch x := v.(type) {
		case map[string]string:
			return x, true
		case map[string]any:
			out := make(map[string]any, len(x))
			for k, item := range x {
				c, ok := convertOrUnknown(FieldString, item)
				if !ok {
					return nil, false
				}
				out[k] = c
			}
			return out, true
		}
	default: // FieldAny, or a type this version does not know
		return v, true
	}
	return nil, false
}

func convertOrUnknown(ft FieldType, v any) (any, bool) {
	if _, ok := v.(unknown); ok {
		return v, true
	}
	return convert(ft, v)
}

// valueForMessage describes a value as "string ("abc")", "number (1.5)" or
// "list (["a",1])", shortened so that a large output stays readable.
func valueForMessage(v any) string {
	var s string
	switch x := v.(type) {
	case string:
		s = strconv.Quote(x)
	case json.Number:
		s = x.String()
	default:
		var err error
		if s, err = format(v); err != nil {
			s = fmt.Sprint(v)
		}
		if v == nil {
			s = "null"
		}
	}
	const maxLen = 80
	if len(s) > maxLen {
		s = s[:maxLen] + "..."
	}
	return fmt.Sprintf("%s (%s)", typeName(v), s)
}

// staticWith resolves what of a `with` value is known before the run:
// references to params in known (bound values, or declared defaults). A
// string that is exactly a reference to an output its node declares (outs,
// by node id) becomes that output's type, which ConvertWith checks against
// the field's. A string that references any other node output, or a param
// not in known, becomes unknown, which ConvertWith lets pass.
func staticWith(v any, known map[string]any, outs map[string]map[string]ParamType) any {
	switch x := v.(type) {
	case string:
		if !HasRef(x) {
			return x
		}
		t, err := parseTemplate(x)
		if err != nil {
			return unknown{}
		}
		if r := t.single(); r != nil && r.Kind == "nodes" {
			if pt, ok := outs[r.Name][r.Key]; ok && pt != ParamAny {
				return declared{t: pt}
			}
		}
		refs, err := Refs(x)
		if err != nil {
			return unknown{}
		}
		for _, r := range refs {
			if _, ok := known[r.Name]; r.Kind != "params" || !ok {
				return unknown{}
			}
		}
		r, err := interpolateString(x, Scope{Params: known}, "", nil)
		if err != nil {
			return unknown{}
		}
		return r
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, item := range x {
			out[k] = staticWith(item, known, outs)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, item := range x {
			out[i] = staticWith(item, known, outs)
		}
		return out
	}
	return v
}

// FieldTypes returns the declared types of t's fields, leaving out FieldAny:
// what a plan records so the run can convert references without the
// registry.
func (t NodeType) FieldTypes() map[string]FieldType {
	var out map[string]FieldType
	for _, f := range t.Fields {
		if f.Type == "" || f.Type == FieldAny {
			continue
		}
		if out == nil {
			out = make(map[string]FieldType, len(t.Fields))
		}
		out[f.Name] = f.Type
	}
	return out
}

// checkConversions reports each `with` field of n whose statically known
// value (literals aside: references to the params in known, and to the
// outputs nodes declare in outs) does not convert to its declared type, at
// the field's position.
func checkConversions(e *errs, n *Node, fields map[string]FieldType, known map[string]any, outs map[string]map[string]ParamType, blockPos Pos) {
	for _, k := range slices.Sorted(maps.Keys(n.With)) {
		raw := map[string]any{k: n.With[k]}
		static, _ := staticWith(raw, known, outs).(map[string]any)
		if _, err := ConvertWith(fields, raw, static); err != nil {
			pos := n.WithKeyPos[k]
			if pos == (Pos{}) {
				pos = blockPos
			}
			e.at(pos, "node %s: %v", n.ID, err)
		}
	}
}

// knownDefaults returns the params whose value Validate can assume: those
// with a non-null default.
func (s *Spec) knownDefaults() map[string]any {
	out := map[string]any{}
	for _, p := range s.Params {
		if p.HasDefault && p.Default != nil {
			out[p.Name] = p.Default
		}
	}
	return out
}
