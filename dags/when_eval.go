package dags

import (
	"cmp"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/retrain-ml/retrain/internal/number"
)

// truthy applies the truthiness rules to v, the value of the source text
// src: bools as they are; the strings "true" and "false" in any case
// (outputs are often text); numbers true unless zero; null false.
// Anything else is an error rather than a guess.
func truthy(src string, v any) (bool, error) {
	switch v := v.(type) {
	case bool:
		return v, nil
	case nil:
		return false, nil
	case string:
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
		return false, fmt.Errorf("%s is %q, which is not true or false", src, v)
	}
	if f, ok := number.Of(v); ok {
		if math.IsNaN(f) {
			return false, fmt.Errorf("%s is NaN, which is not true or false", src)
		}
		return f != 0, nil
	}
	return false, fmt.Errorf("%s is a %s, which is not true or false", src, typeName(v))
}

// compare applies a comparison operator. Numbers compare numerically, also
// against strings that hold a number (outputs such as exit_code may arrive
// as text or as float64); strings lexically; anything else by equality
// only, with values of different types never equal.
func compare(e cmpSite, l, r any) (bool, error) {
	lf, lnum := number.Of(l)
	rf, rnum := number.Of(r)
	ls, lstr := l.(string)
	rs, rstr := r.(string)
	if lnum && rstr {
		rf, rnum = numericString(rs)
	} else if rnum && lstr {
		lf, lnum = numericString(ls)
	}
	var c int
	switch {
	case lnum && rnum:
		if math.IsNaN(lf) || math.IsNaN(rf) {
			return false, fmt.Errorf("%s: NaN cannot be compared", e.src)
		}
		c = cmp.Compare(lf, rf)
	case lstr && rstr:
		c = strings.Compare(ls, rs)
	default:
		switch e.op {
		case "==", "!=":
			eq, err := equal(l, r)
			if err != nil {
				return false, fmt.Errorf("%s: %v", e.src, err)
			}
			return eq == (e.op == "=="), nil
		}
		return false, fmt.Errorf("%s: cannot order %s and %s", e.src, describeValue(l), describeValue(r))
	}
	switch e.op {
	case "==":
		return c == 0, nil
	case "!=":
		return c != 0, nil
	case "<":
		return c < 0, nil
	case "<=":
		return c <= 0, nil
	case ">":
		return c > 0, nil
	default: // ">="
		return c >= 0, nil
	}
}

// equal compares values that are not both numbers or both strings. Values
// of different types are not equal; same-typed ones are equal when their
// canonical JSON is (map keys sorted, numbers in shortest form).
func equal(l, r any) (bool, error) {
	if typeName(l) != typeName(r) {
		return false, nil
	}
	lj, err := compactJSON(l)
	if err != nil {
		return false, err
	}
	rj, err := compactJSON(r)
	if err != nil {
		return false, err
	}
	return lj == rj, nil
}

// numericString reads text as a number by package number's rule: decimal
// digits, surrounding space ignored (stdout ends with a newline); "NaN",
// "Inf", hex and underscores are text that merely could be read as one.
func numericString(s string) (float64, bool) {
	f, err := number.Text(s)
	return f, err == nil
}

// typeName names a value's JSON type.
func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "bool"
	case string:
		return "string"
	case []any, []string:
		return "list"
	case map[string]any, map[string]string:
		return "map"
	}
	if _, ok := number.Of(v); ok {
		return "number"
	}
	return fmt.Sprintf("%T", v)
}

func describeValue(v any) string {
	switch v.(type) {
	case nil, []any, []string, map[string]any, map[string]string:
		return typeName(v)
	}
	s, err := format(v)
	if err != nil {
		return typeName(v)
	}
	if _, ok := v.(string); ok {
		s = strconv.Quote(s)
	}
	return typeName(v) + " " + s
}
