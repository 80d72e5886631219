package dags

import (
	"reflect"
	"strings"
	"testing"
)

func TestConvertWith(t *testing.T) {
	fields := map[string]FieldType{
		"s": FieldString, "i": FieldInt, "f": FieldNumber, "b": FieldBool, "d": FieldDuration,
		"sl": FieldStringList, "il": FieldIntList, "sm": FieldStringMap, "any": FieldAny,
	}
	tests := []struct {
		name     string
		raw      map[string]any
		resolved map[string]any
		want     map[string]any
		err      string
	}{
		{"int into string", map[string]any{"s": "${nodes.a.outputs.x}"}, map[string]any{"s": float64(0)}, map[string]any{"s": "0"}, ""},
		{"float into string", map[string]any{"s": "${params.p}"}, map[string]any{"s": 0.25}, map[string]any{"s": "0.25"}, ""},
		{"bool into string", map[string]any{"s": "${params.p}"}, map[string]any{"s": true}, map[string]any{"s": "true"}, ""},
		{"numeric string into int", map[string]any{"i": "${params.p}"}, map[string]any{"i": " 42"}, map[string]any{"i": int64(42)}, ""},
		{"integral float into int", map[string]any{"i": "${params.p}"}, map[string]any{"i": float64(3)}, map[string]any{"i": int64(3)}, ""},
		{"numeric string into number", map[string]any{"f": "${params.p}"}, map[string]any{"f": "1.5"}, map[string]any{"f": 1.5}, ""},
		{"list items into string list", map[string]any{"sl": []any{"echo", "${nodes.a.outputs.x}"}}, map[string]any{"sl": []any{"echo", float64(7)}}, map[string]any{"sl": []any{"echo", "7"}}, ""},
		{"whole list into int list", map[string]any{"il": "${params.p}"}, map[string]any{"il": []any{"1", float64(2)}}, map[string]any{"il": []any{int64(1), int64(2)}}, ""},
		{"map values into string map", map[string]any{"sm": map[string]any{"N": "${params.p}", "X": "y"}}, map[string]any{"sm": map[string]any{"N": float64(5), "X": "y"}}, map[string]any{"sm": map[string]any{"N": "5", "X": "y"}}, ""},
		{"literal left alone", map[string]any{"i": "abc"}, map[string]any{"i": "abc"}, map[string]any{"i": "abc"}, ""},
		{"any field left alone", map[string]any{"any": "${params.p}"}, map[string]any{"any": []any{1}}, map[string]any{"any": []any{1}}, ""},
		{"unknown field left alone", map[string]any{"zz": "${params.p}"}, map[string]any{"zz": 1.5}, map[string]any{"zz": 1.5}, ""},
		{"null stays null", map[string]any{"s": "${params.p}"}, map[string]any{"s": nil}, map[string]any{"s": nil}, ""},

		{"text into int", map[string]any{"i": "${params.p}"}, map[string]any{"i": "abc"}, nil, `with.i: ${params.p} is a string ("abc"), want int`},
		{"fraction into int", map[string]any{"i": "${params.p}"}, map[string]any{"i": 1.5}, nil, `with.i: ${params.p} is a number (1.5), want int`},
		{"fraction string into int", map[string]any{"i": "${params.p}"}, map[string]any{"i": "1.5"}, nil, `with.i: ${params.p} is a string ("1.5"), want int`},
		{"bool into int", map[string]any{"i": "${params.p}"}, map[string]any{"i": true}, nil, `with.i: ${params.p} is a bool (true), want int`},
		{"string into bool", map[string]any{"b": "${params.p}"}, map[string]any{"b": "yes"}, nil, `with.b: ${params.p} is a string ("yes"), want bool`},
		{"number into duration", map[string]any{"d": "${params.p}"}, map[string]any{"d": float64(10)}, nil, `with.d: ${params.p} is a number (10), want duration`},
		{"list into string", map[string]any{"s": "${params.p}"}, map[string]any{"s": []any{"a"}}, nil, `with.s: ${params.p} is a list (["a"]), want string`},
		{"map into string", map[string]any{"s": "${params.p}"}, map[string]any{"s": map[string]any{"a": 1}}, nil, `with.s: ${params.p} is a map ({"a":1}), want string`},
		{"bad item names its index", map[string]any{"il": []any{1, "${params.p}"}}, map[string]any{"il": []any{1, "x"}}, nil, `with.il[1]: ${params.p} is a string ("x"), want int`},
		{"bad item of a whole list", map[string]any{"il": "${params.p}"}, map[string]any{"il": []any{1, "x"}}, nil, `with.il: ${params.p} is a list ([1,"x"]), want []int`},
		{"map value", map[string]any{"sm": map[string]any{"K": "${params.p}"}}, map[string]any{"sm": map[string]any{"K": []any{}}}, nil, `with.sm.K: ${params.p} is a list ([]), want string`},
		{"text with references into int", map[string]any{"i": "1${params.p}"}, map[string]any{"i": "1x"}, nil, `with.i: 1${params.p} is a string ("1x"), want int`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ConvertWith(fields, tt.raw, tt.resolved)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestConvertWithWithoutFieldsChangesNothing(t *testing.T) {
	// A plan recorded before field types existed: the run converts nothing.
	resolved := map[string]any{"argv": []any{"echo", float64(0)}}
	got, err := ConvertWith(nil, map[string]any{"argv": []any{"echo", "${nodes.a.outputs.x}"}}, resolved)
	if err != nil || !reflect.DeepEqual(got, resolved) {
		t.Errorf("got %v, %v", got, err)
	}
}

const convertSpec = `name: conv
params:
  epochs: {type: string, default: %s}
  rows: {type: int, default: 5}
nodes:
  - {id: a, type: command, with: {argv: ["true"]}}
  - id: train
    type: train
    needs: [a]
    with:
      epochs: "${params.epochs}"
      rows: "${params.rows}"
      later: "${nodes.a.outputs.exit_code}"
`

func convertRegistry(t *testing.T) *Registry {
	reg, err := NewRegistry(
		NodeType{Name: "command", Fields: []Field{{Name: "argv", Type: FieldStringList}}, Outputs: []string{"exit_code"}},
		NodeType{Name: "train", Fields: []Field{{Name: "epochs", Type: FieldInt}, {Name: "rows", Type: FieldString}, {Name: "later", Type: FieldInt}}},
	)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func TestValidateChecksParamDefaultsAgainstFieldTypes(t *testing.T) {
	reg := convertRegistry(t)
	s, err := Parse("conv.yaml", []byte(strings.Replace(convertSpec, "%s", `"abc"`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	err = s.Validate(reg)
	want := `conv.yaml:11:7: node train: with.epochs: ${params.epochs} is a string ("abc"), want int`
	if err == nil || err.Error() != want {
		t.Fatalf("Validate = %v, want %q", err, want)
	}

	// A numeric default converts; the int into a string field is formatted;
	// a node output is only known at run time and passes.
	s, err = Parse("conv.yaml", []byte(strings.Replace(convertSpec, "%s", `"10"`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Compile(s, reg, nil)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	if got := plan.Nodes[1].Fields["epochs"]; got != FieldInt {
		t.Errorf("plan records epochs as %q, want int", got)
	}

	// The bound value is checked too, before the run.
	_, err = Compile(s, reg, map[string]any{"epochs": "many"})
	want = `conv.yaml:11:7: node train: with.epochs: ${params.epochs} is a string ("many"), want int`
	if err == nil || err.Error() != want {
		t.Fatalf("Compile = %v, want %q", err, want)
	}
}
