package gate

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
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

// String formats n for a message: the shortest representation, rounded
// to six significant digits when it has more (0.23640000000000005 is
// 0.2364, an AUC 0.7663825254602966 is 0.766383), so float noise does not
// reach a gate's reasons. JSON keeps every digit (MarshalJSON).
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
	if short := strconv.FormatFloat(f, 'g', -1, 64); significantDigits(short) <= 6 {
		return short
	}
	return strconv.FormatFloat(f, 'g', 6, 64)
}

// significantDigits counts the digits of a formatted number's mantissa,
// leading zeros left out.
func significantDigits(s string) int {
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		s = s[:i]
	}
	s = strings.TrimLeft(strings.NewReplacer("-", "", ".", "").Replace(s), "0")
	return len(s)
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
