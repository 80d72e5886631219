package number

import "strconv"

// Count writes n with a comma between groups of three digits
// (28572 → "28,572"), as the one-line summaries of nodes show row counts.
func Count[T ~int | ~int32 | ~int64](n T) string {
	s := strconv.FormatInt(int64(n), 10)
	neg := ""
	if s[0] == '-' {
		neg, s = "-", s[1:]
	}
	if len(s) <= 3 {
		return neg + s
	}
	b := make([]byte, 0, len(s)+len(s)/3)
	head := len(s) % 3
	if head == 0 {
		head = 3
	}
	b = append(b, s[:head]...)
	for i := head; i < len(s); i += 3 {
		b = append(b, ',')
		b = append(b, s[i:i+3]...)
	}
	return neg + string(b)
}
