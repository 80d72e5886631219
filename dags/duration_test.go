package dags

import (
	"strings"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"0", 0},
		{"0s", 0},
		{"1s", time.Second},
		{"+5m", 5 * time.Minute},
		{"1h30m", 90 * time.Minute},
		{"1d", 24 * time.Hour},
		{"1d12h", 36 * time.Hour},
		{"1.5d", 36 * time.Hour},
		{"2d3h4m5s6ms", 51*time.Hour + 4*time.Minute + 5*time.Second + 6*time.Millisecond},
		{"500ms", 500 * time.Millisecond},
		{"10us", 10 * time.Microsecond},
		{"10µs", 10 * time.Microsecond},
		{"3ns", 3},
		{"1h1d", 25 * time.Hour},
	} {
		got, err := ParseDuration(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"", "invalid duration"},
		{"-1s", "negative"},
		{"-0s", "negative"},
		{"10", "missing unit"},
		{"1d2", "missing unit"},
		{"5y", `unknown unit "y"`},
		{"1 d", `unknown unit " d"`},
		{"d", "invalid duration"},
		{"1..5s", "invalid duration"},
		{"s1", "invalid duration"},
		{"200000d", "too long"},
		{"106751d23h47m16s854775808ns", "too long"},
	} {
		if _, err := ParseDuration(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseDuration(%q): got error %v, want %q", tc.in, err, tc.want)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Minute: "1m", time.Hour: "1h", 90 * time.Second: "1m30s", time.Second: "1s",
		90 * time.Minute: "1h30m", 500 * time.Millisecond: "500ms",
	} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
