package dags

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/retrain-ml/retrain/internal/number"
)

// OutputNameRule says what ValidOutputName accepts, for messages.
const OutputNameRule = "use letters, digits, '_' and '-', starting with a letter or '_' (the KEY of ${nodes.ID.outputs.KEY})"

// ValidOutputName reports whether name can be an output key: whether a
// reference ${nodes.ID.outputs.NAME} can name it. A node type whose outputs
// are chosen at run time (a command's $RETRAIN_OUTPUTS file) refuses other
// keys, which nothing could refer to.
func ValidOutputName(name string) bool {
	return keyRe.MatchString(name)
}

// CheckOutputs checks a node's outputs against the outputs its spec
// declared: each declared key must be present with a value of its type.
// Keys not declared pass. The error lists every problem, in key order, as
// `output auc is a string ("n/a"), want number`. It is pure: the Pipeline
// workflow calls it on a node's result. Values are as a JSON round trip
// gives them: an int is a float64 with no fraction.
func CheckOutputs(declared map[string]ParamType, outputs map[string]any) error {
	var problems []string
	for _, k := range slices.Sorted(maps.Keys(declared)) {
		want := declared[k]
		v, ok := outputs[k]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("output %s is missing, want %s", k, want))
		case !outputFits(want, v):
			problems = append(problems, fmt.Sprintf("output %s is %s, want %s", k, outputForMessage(v), want))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(problems, "; "))
}

// outputFits reports whether v is a value of the declared type t. Unlike a
// param's, an output is not converted: "0.7" is a string, not a number, so
// that a program that prints the wrong thing fails where it did so.
func outputFits(t ParamType, v any) bool {
	switch t {
	case ParamAny:
		return true
	case ParamString:
		_, ok := v.(string)
		return ok
	case ParamBool:
		_, ok := v.(bool)
		return ok
	case ParamNumber:
		f, ok := number.Of(v)
		return ok && !math.IsNaN(f) && !math.IsInf(f, 0)
	case ParamInt:
		if _, ok := number.Of(v); !ok {
			return false
		}
		_, ok := toInt64(v)
		return ok
	case ParamList:
		switch v.(type) {
		case []any, []string:
			return true
		}
	case ParamMap:
		switch v.(type) {
		case map[string]any, map[string]string:
			return true
		}
	}
	return false
}

// outputForMessage describes a value with its article: `a string ("n/a")`,
// `a number (0.7)`, `null`.
func outputForMessage(v any) string {
	if v == nil {
		return "null"
	}
	return "a " + valueForMessage(v)
}

// declared stands, in a block resolved before the run, for a node output
// the spec declared: its value is only known at run time, its type now.
type declared struct {
	t ParamType
}

// declaredFits reports whether every value of the declared type t converts
// to the field type ft, as ConvertWith would convert it at run time. A
// string into an int field is refused although "5" would convert: the
// declaration says text, and text is not a count.
func declaredFits(ft FieldType, t ParamType) bool {
	switch ft {
	case FieldString:
		return t == ParamString || t == ParamInt || t == ParamNumber || t == ParamBool || t == ParamDuration
	case FieldDuration:
		return t == ParamString || t == ParamDuration
	case FieldInt:
		return t == ParamInt
	case FieldNumber:
		return t == ParamInt || t == ParamNumber
	case FieldBool:
		return t == ParamBool
	case FieldStringList, FieldIntList:
		return t == ParamList
	case FieldStringMap:
		return t == ParamMap
	}
	return true
}

// declaredOutputs returns the outputs each node of s declares, by node id.
func (s *Spec) declaredOutputs() map[string]map[string]ParamType {
	out := map[string]map[string]ParamType{}
	for _, list := range [][]*Node{s.Nodes, s.OnFailure} {
		for _, n := range list {
			if n.Outputs != nil {
				if _, dup := out[n.ID]; !dup {
					out[n.ID] = n.Outputs
				}
			}
		}
	}
	return out
}
