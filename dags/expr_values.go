package dags

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/retrain-ml/retrain/internal/number"
)

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
