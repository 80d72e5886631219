package gate

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// Number is a figure in a Result. It encodes to JSON as a number when
// finite and as the string "NaN", "+Inf" or "-Inf" otherwise: the figures
// that fail a gate are exactly the ones a run record must keep, and
// encoding/json refuses to encode them as float64.
type Number float64

// num returns a pointer to f as a Number, for the optional figures of a
// Comparison.
func num(f float64) *Number {
	n := Number(f)
	return &n
}

// String formats n like strconv with the shortest representation.
func (n Number) String() string {
	f := float64(n)
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// MarshalJSON implements json.Marshaler.
func (n Number) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return strconv.AppendQuote(nil, n.String()), nil
	}
	return json.Marshal(f)
}

// UnmarshalJSON implements json.Unmarshaler. It accepts a number or one of
// the strings MarshalJSON writes ("Inf" too).
func (n *Number) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		switch s {
		case "NaN":
			*n = Number(math.NaN())
		case "+Inf", "Inf":
			*n = Number(math.Inf(1))
		case "-Inf":
			*n = Number(math.Inf(-1))
		default:
			return fmt.Errorf("gate: %q is not a number", s)
		}
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("gate: decoding number: %w", err)
	}
	*n = Number(f)
	return nil
}
