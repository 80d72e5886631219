package dags

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// ParseDuration parses a duration in time.ParseDuration syntax ("1h30m",
// "500ms") extended with a "d" unit of 24 hours ("1d12h"), because retrain
// schedules and timeouts are often days long. Negative durations are
// errors: no setting in a spec means anything by one.
func ParseDuration(s string) (time.Duration, error) {
	orig := s
	if strings.HasPrefix(s, "-") {
		return 0, fmt.Errorf("invalid duration %q: negative", orig)
	}
	s = strings.TrimPrefix(s, "+")
	if s == "" {
		return 0, fmt.Errorf("invalid duration %q", orig)
	}
	if s == "0" {
		return 0, nil
	}
	var total time.Duration
	for s != "" {
		// One segment: a number, then a unit up to the next digit or dot.
		i := 0
		for i < len(s) && (s[i] == '.' || '0' <= s[i] && s[i] <= '9') {
			i++
		}
		if i == 0 {
			return 0, fmt.Errorf("invalid duration %q", orig)
		}
		j := i
		for j < len(s) && s[j] != '.' && (s[j] < '0' || s[j] > '9') {
			j++
		}
		num, unit := s[:i], s[i:j]
		s = s[j:]
		var d time.Duration
		switch unit {
		case "":
			return 0, fmt.Errorf("invalid duration %q: missing unit (for example %ss)", orig, num)
		case "d":
			h, err := time.ParseDuration(num + "h")
			if err != nil {
				return 0, fmt.Errorf("invalid duration %q", orig)
			}
			if h > math.MaxInt64/24 {
				return 0, fmt.Errorf("invalid duration %q: too long", orig)
			}
			d = 24 * h
		case "ns", "us", "µs", "μs", "ms", "s", "m", "h":
			var err error
			if d, err = time.ParseDuration(num + unit); err != nil {
				return 0, fmt.Errorf("invalid duration %q", orig)
			}
		default:
			return 0, fmt.Errorf("invalid duration %q: unknown unit %q (use ns, us, ms, s, m, h or d)", orig, unit)
		}
		if total > math.MaxInt64-d {
			return 0, fmt.Errorf("invalid duration %q: too long", orig)
		}
		total += d
	}
	return total, nil
}

// formatDuration prints d the way a spec would write it, for messages.
func formatDuration(d time.Duration) string {
	s := d.String()
	// time.Duration prints "1m0s" and "1h0m0s"; trim the zero tails.
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
