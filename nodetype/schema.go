package nodetype

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/retrain-ml/retrain/dags"
)

// Schema derives a node type's `with` fields from its inputs struct W, so
// the struct is the one place a field's name, type, default, whether it is
// required and its documentation are written. A field of W is read as:
//
//		Epochs int `json:"epochs" default:"2" doc:"passes over the training data"`
//
//	  - json: the key in `with` (encoding/json's rules; "-" and unexported
//	    fields are skipped, embedded structs are flattened);
//	  - doc: what the field means, shown by `retrain dag types` and the docs;
//	  - default: the value when the key is absent, as a JSON literal (bare
//	    text for a string field); DecodeWith applies it;
//	  - required:"true": the key must be present;
//	  - literal:"true": the value must be written in the spec, not
//	    computed from a ${...}: validation refuses a reference (deploy's
//	    force: only the spec's author may turn it on);
//	  - type: overrides the field type derived from the Go type, for a
//	    string holding a duration (type:"duration") or a value of several
//	    shapes (type:"any");
//	  - nested: for a field of type any, the types of values inside it,
//	    checked at validation (see dags.Nested): nested:"*.min:number".
//
// Go types map to field types: string, bool, ints (int), floats (number),
// []string, []int, map[string]string; interfaces, maps of other values,
// json.RawMessage and structs are "any". A pointer is its element's type.
func Schema[W any]() ([]dags.Field, error) {
	return schemaOf(reflect.TypeFor[W]())
}

func schemaOf(t reflect.Type) ([]dags.Field, error) {
	if t.Kind() == reflect.Map {
		return nil, nil // an open block: OpenWith says which keys go
	}
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("%v: want a struct", t)
	}
	var fields []dags.Field
	for _, sf := range reflect.VisibleFields(t) {
		if !sf.IsExported() || sf.Anonymous {
			continue
		}
		name, ok := jsonName(sf)
		if !ok {
			continue
		}
		f := dags.Field{Name: name, Doc: sf.Tag.Get("doc"), Required: sf.Tag.Get("required") == "true",
			Literal: sf.Tag.Get("literal") == "true"}
		if ov, ok := sf.Tag.Lookup("type"); ok {
			f.Type = dags.FieldType(ov)
			if !fieldTypes[f.Type] {
				return nil, fmt.Errorf("field %s: unknown type %q", name, ov)
			}
		} else {
			f.Type = fieldType(sf.Type)
		}
		if tag, ok := sf.Tag.Lookup("nested"); ok {
			if f.Type != dags.FieldAny {
				return nil, fmt.Errorf("field %s: nested types go on a field of type any", name)
			}
			n, err := dags.ParseNested(tag)
			if err != nil {
				return nil, fmt.Errorf("field %s: %w", name, err)
			}
			f.Nested = n
		}
		if def, ok := sf.Tag.Lookup("default"); ok {
			if f.Required {
				return nil, fmt.Errorf("field %s: both required and a default", name)
			}
			v := reflect.New(sf.Type)
			if err := setDefault(v.Elem(), def); err != nil {
				return nil, fmt.Errorf("field %s: default %q: %w", name, def, err)
			}
			f.Default = def
		}
		fields = append(fields, f)
	}
	return fields, nil
}

// jsonName is the key encoding/json uses for sf, and false for a field it
// skips.
func jsonName(sf reflect.StructField) (string, bool) {
	tag := sf.Tag.Get("json")
	if tag == "-" {
		return "", false
	}
	name, _, _ := strings.Cut(tag, ",")
	if name == "" {
		name = sf.Name
	}
	return name, true
}

var rawMessage = reflect.TypeFor[json.RawMessage]()

func fieldType(t reflect.Type) dags.FieldType {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == rawMessage {
		return dags.FieldAny
	}
	switch t.Kind() {
	case reflect.String:
		return dags.FieldString
	case reflect.Bool:
		return dags.FieldBool
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return dags.FieldInt
	case reflect.Float32, reflect.Float64:
		return dags.FieldNumber
	case reflect.Slice:
		switch fieldType(t.Elem()) {
		case dags.FieldString:
			return dags.FieldStringList
		case dags.FieldInt:
			return dags.FieldIntList
		}
	case reflect.Map:
		if t.Key().Kind() == reflect.String && t.Elem().Kind() == reflect.String {
			return dags.FieldStringMap
		}
	}
	return dags.FieldAny
}

// setDefault stores a default tag's value in v: the bare text for a
// string, else the tag read as JSON.
func setDefault(v reflect.Value, def string) error {
	if v.Kind() == reflect.String {
		v.SetString(def)
		return nil
	}
	return json.Unmarshal([]byte(def), v.Addr().Interface())
}

// DecodeWith decodes a `with` block into a W: the defaults its tags give
// first, then the block's keys over them (see Schema).
func DecodeWith[W any](with map[string]any) (W, error) {
	var w W
	v := reflect.ValueOf(&w).Elem()
	if v.Kind() == reflect.Struct {
		for _, sf := range reflect.VisibleFields(v.Type()) {
			def, ok := sf.Tag.Lookup("default")
			if !ok || !sf.IsExported() || sf.Anonymous {
				continue
			}
			if err := setDefault(v.FieldByIndex(sf.Index), def); err != nil {
				return w, fmt.Errorf("default of %s: %w", sf.Name, err)
			}
		}
	}
	if err := Decode(with, &w); err != nil {
		return w, err
	}
	return w, nil
}

// OutputNames are the output keys of a node whose function returns an O:
// O's JSON field names, or none (any key) when O is a map.
func OutputNames[O any]() ([]string, error) {
	t := reflect.TypeFor[O]()
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Map:
		return nil, nil
	case reflect.Struct:
	default:
		return nil, fmt.Errorf("%v: want a struct or a map", t)
	}
	names := []string{}
	for _, sf := range reflect.VisibleFields(t) {
		if !sf.IsExported() || sf.Anonymous {
			continue
		}
		if name, ok := jsonName(sf); ok {
			names = append(names, name)
		}
	}
	return names, nil
}

// Outputs converts a node function's outputs to the map the pipeline
// workflow gets, by way of JSON: the shape they are recorded in. A map
// passes through as it is.
func Outputs[O any](out O) (map[string]any, error) {
	if m, ok := any(out).(map[string]any); ok {
		return m, nil
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("encode outputs: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("outputs must encode as a JSON object: %w", err)
	}
	return m, nil
}

// OutputTypes returns the type of each output of a node whose outputs are
// an O, as a spec would declare it (dags.ParamType), by JSON name; nil for
// a map, which declares none. A value that may encode as null (a pointer,
// a slice, a map, an interface) is marked nullable. `retrain test` checks
// stubbed outputs against them.
func OutputTypes[O any]() map[string]OutputType {
	t := reflect.TypeFor[O]()
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	out := map[string]OutputType{}
	for _, sf := range reflect.VisibleFields(t) {
		if !sf.IsExported() || sf.Anonymous {
			continue
		}
		if name, ok := jsonName(sf); ok {
			out[name] = outputType(sf.Type)
		}
	}
	return out
}

// OutputType is an output's type and whether it may be null.
type OutputType struct {
	Type     dags.ParamType
	Nullable bool
}

var (
	timeType      = reflect.TypeFor[time.Time]()
	marshalerType = reflect.TypeFor[json.Marshaler]()
)

func outputType(t reflect.Type) OutputType {
	nullable := false
	for t.Kind() == reflect.Pointer {
		t, nullable = t.Elem(), true
	}
	switch {
	case t == timeType:
		return OutputType{Type: dags.ParamString, Nullable: nullable}
	case t.Implements(marshalerType) || reflect.PointerTo(t).Implements(marshalerType):
		return OutputType{Type: dags.ParamAny, Nullable: true}
	}
	switch t.Kind() {
	case reflect.String:
		return OutputType{Type: dags.ParamString, Nullable: nullable}
	case reflect.Bool:
		return OutputType{Type: dags.ParamBool, Nullable: nullable}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return OutputType{Type: dags.ParamInt, Nullable: nullable}
	case reflect.Float32, reflect.Float64:
		return OutputType{Type: dags.ParamNumber, Nullable: nullable}
	case reflect.Slice, reflect.Array:
		return OutputType{Type: dags.ParamList, Nullable: true}
	case reflect.Map:
		return OutputType{Type: dags.ParamMap, Nullable: true}
	case reflect.Struct:
		return OutputType{Type: dags.ParamMap, Nullable: nullable}
	}
	return OutputType{Type: dags.ParamAny, Nullable: true}
}
